// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The test program of `pytest-lbr selftest` (pytest_lbr/selftest/program.py).
 * It calls two helpers the function tracer can see, in this order, so both
 * backends have calls from it to record, and the JIT addresses of its two call
 * sites have known lines of this file to symbolize to.  Architecture neutral:
 * one object, no PT_REGS.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int lbr_selftest(struct xdp_md *ctx)
{
	/*
	 * Each result decides the verdict, so neither call is dead code; the
	 * selftest checks that each call site's line names its helper.
	 */
	if (bpf_csum_diff(NULL, 0, NULL, 0, 0) != 0)
		return XDP_ABORTED;
	if (bpf_xdp_adjust_head(ctx, 0) != 0)
		return XDP_ABORTED;
	return XDP_PASS;
}
