// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Program-to-program flow in one XDP object: a bpf_loop() callback (the
 * verifier inlines bpf_loop into a plain loop calling loop_cb), a global
 * subprogram (verified and called on its own) and a tail call into a second
 * program through a program array. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define LOOPS 2

/* Slot 0: stage2, filled in by the test. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stages SEC(".maps");

/* The per-step state bpf_loop hands to loop_cb. */
struct loop_ctx {
	__u64 sum;
};

static long loop_cb(__u32 i, void *data)
{
	struct loop_ctx *lc = data;

	lc->sum += bpf_get_prandom_u32() & 1;
	return 0;
}

/* A global function: the verifier checks it once, by its signature. */
__attribute__((noinline)) int sub_stamp(__u32 seed)
{
	return (bpf_ktime_get_ns() ^ seed) & 1;
}

SEC("xdp")
int stage2(struct xdp_md *ctx)
{
	return bpf_get_prandom_u32() ? XDP_PASS : XDP_PASS;
}

SEC("xdp")
int entry(struct xdp_md *ctx)
{
	struct loop_ctx lc = {};

	bpf_loop(LOOPS, loop_cb, &lc, 0);
	sub_stamp(lc.sum);
	bpf_tail_call(ctx, &stages, 0);
	/* Only when slot 0 is empty. */
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
