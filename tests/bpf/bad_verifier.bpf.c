// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Compiles, but the verifier rejects it: it reads the packet without checking
 * data_end. Used to test that a load failure carries the verifier log. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int bad_access(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;

	return data[0] == 1 ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
