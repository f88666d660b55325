// SPDX-License-Identifier: GPL-2.0
/* A sampling profiler's program (SEC("perf_event")), as profile.bpf.c in
 * libbpf-bootstrap is: on each cpu-clock sample of the target process, its kernel
 * stack with bpf_get_stack and a count (tests/conformance/test_perf_sample.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MAX_DEPTH 32

/* One .bss variable, laid out as written: tgid (set by user space after load),
 * samples of it, the deepest stack seen, and the last stack. */
struct {
	__u32 tgid;
	__u64 samples, deepest;
	__u64 stack[MAX_DEPTH];
} g;

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	long n;

	if (bpf_get_current_pid_tgid() >> 32 != g.tgid)
		return 0;
	n = bpf_get_stack(ctx, g.stack, sizeof(g.stack), 0);
	__sync_fetch_and_add(&g.samples, 1);
	if (n > 0 && (__u64)n / 8 > g.deepest)
		g.deepest = n / 8;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
