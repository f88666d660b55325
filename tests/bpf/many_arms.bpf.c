// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* 24 arms, each counting its own runs in `arm_runs`: the kernel's own count of what
 * ran, against which coverage's claims are checked (tests/kernel/test_coverage_truth.py).
 * The packet's first byte picks the arm. Arms 0-7 only count; 8-15 also call a helper;
 * 16-19 update a map; 20-23 call a subprogram. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define ARMS 24

__u64 arm_runs[ARMS];
__u64 accounted;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ARMS);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

static __attribute__((noinline)) int account(__u32 arm)
{
	__sync_fetch_and_add(&accounted, 1);			/* sub: account */
	return arm & 1 ? XDP_PASS : XDP_TX;			/* sub: account */
}

SEC("xdp")
int many_arms(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *sel = data;
	__u64 one = 1;
	__u32 arm;

	if ((void *)(sel + 1) > end)
		return XDP_ABORTED;
	arm = *sel;
	if (arm == 0) {
		__sync_fetch_and_add(&arm_runs[0], 1);		/* arm 0 */
		return XDP_PASS;				/* arm 0 */
	}
	if (arm == 1) {
		__sync_fetch_and_add(&arm_runs[1], 1);		/* arm 1 */
		return XDP_DROP;				/* arm 1 */
	}
	if (arm == 2) {
		__sync_fetch_and_add(&arm_runs[2], 1);		/* arm 2 */
		return XDP_PASS;				/* arm 2 */
	}
	if (arm == 3) {
		__sync_fetch_and_add(&arm_runs[3], 1);		/* arm 3 */
		return XDP_DROP;				/* arm 3 */
	}
	if (arm == 4) {
		__sync_fetch_and_add(&arm_runs[4], 1);		/* arm 4 */
		return XDP_PASS;				/* arm 4 */
	}
	if (arm == 5) {
		__sync_fetch_and_add(&arm_runs[5], 1);		/* arm 5 */
		return XDP_DROP;				/* arm 5 */
	}
	if (arm == 6) {
		__sync_fetch_and_add(&arm_runs[6], 1);		/* arm 6 */
		return XDP_PASS;				/* arm 6 */
	}
	if (arm == 7) {
		__sync_fetch_and_add(&arm_runs[7], 1);		/* arm 7 */
		return XDP_DROP;				/* arm 7 */
	}
	if (arm == 8) {
		__sync_fetch_and_add(&arm_runs[8], 1);		/* arm 8 */
		return bpf_get_prandom_u32() & 1 ? XDP_PASS : XDP_DROP;	/* arm 8 */
	}
	if (arm == 9) {
		__sync_fetch_and_add(&arm_runs[9], 1);		/* arm 9 */
		return bpf_ktime_get_ns() ? XDP_PASS : XDP_DROP;	/* arm 9 */
	}
	if (arm == 10) {
		__sync_fetch_and_add(&arm_runs[10], 1);		/* arm 10 */
		return bpf_get_prandom_u32() & 2 ? XDP_PASS : XDP_DROP;	/* arm 10 */
	}
	if (arm == 11) {
		__sync_fetch_and_add(&arm_runs[11], 1);		/* arm 11 */
		return bpf_ktime_get_ns() & 1 ? XDP_PASS : XDP_DROP;	/* arm 11 */
	}
	if (arm == 12) {
		__sync_fetch_and_add(&arm_runs[12], 1);		/* arm 12 */
		return bpf_get_prandom_u32() & 4 ? XDP_PASS : XDP_DROP;	/* arm 12 */
	}
	if (arm == 13) {
		__sync_fetch_and_add(&arm_runs[13], 1);		/* arm 13 */
		return bpf_ktime_get_ns() & 2 ? XDP_PASS : XDP_DROP;	/* arm 13 */
	}
	if (arm == 14) {
		__sync_fetch_and_add(&arm_runs[14], 1);		/* arm 14 */
		return bpf_get_prandom_u32() & 8 ? XDP_PASS : XDP_DROP;	/* arm 14 */
	}
	if (arm == 15) {
		__sync_fetch_and_add(&arm_runs[15], 1);		/* arm 15 */
		return bpf_ktime_get_ns() & 4 ? XDP_PASS : XDP_DROP;	/* arm 15 */
	}
	if (arm == 16) {
		__sync_fetch_and_add(&arm_runs[16], 1);		/* arm 16 */
		bpf_map_update_elem(&seen, &arm, &one, BPF_ANY);	/* arm 16 */
		return XDP_PASS;				/* arm 16 */
	}
	if (arm == 17) {
		__sync_fetch_and_add(&arm_runs[17], 1);		/* arm 17 */
		bpf_map_update_elem(&seen, &arm, &one, BPF_ANY);	/* arm 17 */
		return XDP_DROP;				/* arm 17 */
	}
	if (arm == 18) {
		__sync_fetch_and_add(&arm_runs[18], 1);		/* arm 18 */
		bpf_map_update_elem(&seen, &arm, &one, BPF_ANY);	/* arm 18 */
		return XDP_PASS;				/* arm 18 */
	}
	if (arm == 19) {
		__sync_fetch_and_add(&arm_runs[19], 1);		/* arm 19 */
		bpf_map_update_elem(&seen, &arm, &one, BPF_ANY);	/* arm 19 */
		return XDP_DROP;				/* arm 19 */
	}
	if (arm == 20) {
		__sync_fetch_and_add(&arm_runs[20], 1);		/* arm 20 */
		return account(arm);				/* arm 20 */
	}
	if (arm == 21) {
		__sync_fetch_and_add(&arm_runs[21], 1);		/* arm 21 */
		return account(arm);				/* arm 21 */
	}
	if (arm == 22) {
		__sync_fetch_and_add(&arm_runs[22], 1);		/* arm 22 */
		return account(arm);				/* arm 22 */
	}
	__sync_fetch_and_add(&arm_runs[23], 1);			/* arm 23 */
	return arm == 23 ? account(arm) : XDP_ABORTED;		/* arm 23 */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
