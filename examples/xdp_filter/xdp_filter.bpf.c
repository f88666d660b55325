// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* An XDP ingress filter: drop denied IPv4 sources and packets with a bad
 * header checksum, count bytes per source, and decapsulate VXLAN. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "xdp_filter.h"

/* Source addresses to drop (network byte order), filled by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} denylist SEC(".maps");

/* Packets and bytes per source address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct flow_stats);
} flows SEC(".maps");

/* Verdict counters, indexed by STAT_*. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 key)
{
	__u64 *n = bpf_map_lookup_elem(&stats, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Fold a 32-bit one's-complement sum to 16 bits. */
static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Account the packet to its source: update in place, or insert the first one. */
static __attribute__((noinline)) int account(__u32 saddr, __u64 len)
{
	struct flow_stats *fs, first = { .packets = 1, .bytes = len };

	fs = bpf_map_lookup_elem(&flows, &saddr);
	if (fs) {
		__sync_fetch_and_add(&fs->packets, 1);
		__sync_fetch_and_add(&fs->bytes, len);
		return 0;
	}
	return bpf_map_update_elem(&flows, &saddr, &first, BPF_NOEXIST);
}

SEC("xdp")
int xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp;
	__u32 saddr;

	/* Only IPv4 with a plain 20-byte header is ours; pass everything else. */
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return XDP_PASS;

	/* Denied source: drop before doing any more work. */
	saddr = ip->saddr;
	if (bpf_map_lookup_elem(&denylist, &saddr)) {
		count(STAT_DENIED);
		return XDP_DROP;
	}

	/* A header whose checksum does not verify was corrupted on the way. */
	if (csum_fold(bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0)) != 0) {
		count(STAT_BAD_CSUM);
		return XDP_DROP;
	}

	account(saddr, data_end - data);

	/* VXLAN: strip the outer headers, pass the inner frame up the stack. */
	udp = (void *)(ip + 1);
	if (ip->protocol == IPPROTO_UDP && (void *)(udp + 1) <= data_end &&
	    udp->dest == bpf_htons(VXLAN_PORT)) {
		if (data + OUTER_HLEN + sizeof(struct ethhdr) > data_end)
			return XDP_DROP;
		if (bpf_xdp_adjust_head(ctx, OUTER_HLEN))
			return XDP_ABORTED;
		count(STAT_DECAP);
		return XDP_PASS;
	}

	count(STAT_PASS);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
