// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* XDP programs calling real helpers, for the harness and tracing tests.
 * See tests/bpf/README for what each program does. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdp_helpers.h"

/* Packets seen per first byte. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* LAST_CSUM: checksum of the last header; LAST_CPU: CPU of the last run. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} last SEC(".maps");

/* An LRU hash: an update of a new key takes a free element off the LRU lists
 * (bpf_lru_pop_free) and then locks the bucket through htab_lock_bucket, a
 * notrace inline function the function tracer never records. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} recent SEC(".maps");

/* A real (non-inlined) subprogram, so traces show a BPF-to-BPF call. */
static __attribute__((noinline)) int note_cpu(void)
{
	__u32 key = LAST_CPU;
	__u64 cpu = bpf_get_smp_processor_id();

	bpf_map_update_elem(&last, &key, &cpu, BPF_ANY);
	return 0;
}

SEC("xdp")
int xdp_helpers(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *hdr = data;
	__u32 key, csum_key = LAST_CSUM;
	__u64 one = 1, csum, *count;

	if (data + XDP_HELPERS_HDR > data_end)
		return XDP_ABORTED;

	/* Checksum the header the way a real program would before rewriting it. */
	csum = (__u32)bpf_csum_diff(0, 0, (__be32 *)hdr, XDP_HELPERS_HDR, 0);
	bpf_map_update_elem(&last, &csum_key, &csum, BPF_ANY);

	/* Count packets per first byte: lookup, then update or insert. */
	key = hdr[0];
	count = bpf_map_lookup_elem(&counts, &key);
	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);

	note_cpu();

	if (key == XDP_HELPERS_DROP_BYTE)
		return XDP_DROP;

	/* Strip the header: data_out of a test run starts after it. */
	if (bpf_xdp_adjust_head(ctx, XDP_HELPERS_HDR))
		return XDP_ABORTED;
	return XDP_PASS;
}

SEC("xdp")
int xdp_cpu(struct xdp_md *ctx)
{
	__u32 key = LAST_CPU;
	__u64 cpu = bpf_get_smp_processor_id();

	bpf_map_update_elem(&last, &key, &cpu, BPF_ANY);
	return XDP_PASS;
}

SEC("xdp")
int xdp_lru(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key;
	__u64 one = 1;

	if (data + sizeof(key) > data_end)
		return XDP_ABORTED;
	key = *(__u32 *)data;
	bpf_map_update_elem(&recent, &key, &one, BPF_ANY);
	return XDP_PASS;
}

/* Longer than the kernel's 15-byte program name: only BTF knows it whole. */
SEC("xdp")
int xdp_pass_with_a_long_name(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
