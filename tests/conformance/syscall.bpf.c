// SPDX-License-Identifier: GPL-2.0
/* A syscall program (SEC("syscall")): run from user space with
 * BPF_PROG_TEST_RUN, its context is the caller's own struct. It walks a hash map
 * that user space filled with bpf_for_each_map_elem, sums the values of the
 * keys up to ctx->max_key, writes the sum back into the context and returns how
 * many elements it summed (tests/conformance/test_syscall.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

struct sum_args {
	__u32 max_key;
	__u32 summed;
	__u64 sum;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

struct walk {
	__u32 max_key;
	__u32 summed;
	__u64 sum;
};

static long add_value(struct bpf_map *map, __u32 *key, __u64 *value, struct walk *w)
{
	if (*key <= w->max_key) {
		w->sum += *value;
		w->summed++;
	}
	return 0; /* next element */
}

SEC("syscall")
int sum_values(struct sum_args *ctx)
{
	struct walk w = { .max_key = ctx->max_key };
	long visited;

	visited = bpf_for_each_map_elem(&values, add_value, &w, 0);
	ctx->sum = w.sum;
	ctx->summed = w.summed;
	bpf_printk("syscall: visited %ld, summed %u: %llu", visited, w.summed, w.sum);
	return w.summed;
}

char LICENSE[] SEC("license") = "GPL";
