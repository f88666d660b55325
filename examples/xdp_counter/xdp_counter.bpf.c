// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The README's first example: count packets per source address in a hash
 * map, and sample one packet in four. The C names the helpers as
 * bpf_helpers.h does; the kernel runs them under other names
 * (bpf_get_prandom_u32 is bpf_user_rnd_u32, and the verifier turns the hash
 * lookup into a direct call of __htab_map_lookup_elem). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Packets per IPv4 source address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* Packets the sampler picked: one slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sampled SEC(".maps");

SEC("xdp")
int xdp_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u64 one = 1, *n;
	__u32 src = 0, zero = 0;

	/* Non-IPv4 packets count under source 0. */
	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP))
		src = ip->saddr;
	n = bpf_map_lookup_elem(&counts, &src);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &src, &one, BPF_NOEXIST);

	/* Sample one packet in four (the array lookup is inlined by the verifier). */
	if ((bpf_get_prandom_u32() & 3) == 0) {
		n = bpf_map_lookup_elem(&sampled, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
