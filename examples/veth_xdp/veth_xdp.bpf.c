// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Count the UDP packets to one port that arrive on an interface, checking each
 * IPv4 header's checksum on the way, and let every packet through (XDP_PASS).
 * Attached for real to a veth end (examples/veth_xdp): it runs where the
 * interface receives, in softirq (NAPI), not in BPF_PROG_TEST_RUN. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define PORT 4242

enum { GOOD = 0, BAD_CSUM = 1 };

/* Packets to PORT by verdict (a hash map: its lookup is a real call, where an
 * array's would be inlined by the verifier). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 key)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(&counts, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
}

SEC("xdp")
int veth_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)(ip + 1);
	__s64 sum;

	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(PORT))
		return XDP_PASS;
	/* A header whose checksum holds sums (one's complement) to 0xffff. */
	sum = bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	count(sum == 0xffff ? GOOD : BAD_CSUM);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
