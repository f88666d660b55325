// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* An XDP program that keeps nine values live across a branch: at the join, fewer
 * than two registers are free, so exact coverage's counter there spills two below
 * the program's stack and fills them back. Its verdict depends on every value
 * (tests/bytecode/test_instrument.py runs it as written and counted on the same
 * packets). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pressure(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u64 a, b, c, d, e, f, g, h, i;

	if ((void *)(p + 16) > (void *)end)
		return XDP_ABORTED;
	a = p[0]; b = p[1]; c = p[2]; d = p[3]; e = p[4];
	f = p[5]; g = p[6]; h = p[7]; i = p[8];
	if (p[9] & 1) {
		a += b;
		b ^= c;
	} else {
		c += d;
		d ^= e;
	}
	return (a * 3 + b * 5 + c * 7 + d * 11 + e * 13 + f * 17 + g * 19 + h * 23 + i * 29) % 3;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
