// SPDX-License-Identifier: GPL-2.0
/* An iterator over the elements of a hash map (SEC("iter/bpf_map_elem")): one
 * text line per element with BPF_SEQ_PRINTF, and a trailer when the walk ends
 * with the count and sum of the values (tests/conformance/test_iter_map_elem.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} scores SEC(".maps");

__u64 elems, total;

SEC("iter/bpf_map_elem")
int dump_scores(struct bpf_iter__bpf_map_elem *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	__u32 *key = ctx->key;
	__u64 *value = ctx->value;

	if (!key || !value) {
		BPF_SEQ_PRINTF(seq, "%llu elements, total %llu\n", elems, total);
		return 0;
	}
	elems++;
	total += *value;
	BPF_SEQ_PRINTF(seq, "%u=%llu\n", *key, *value);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
