// SPDX-License-Identifier: GPL-2.0
/* A flow dissector (SEC("flow_dissector")) for IPv4, attached to a network namespace:
 * it replaces the kernel's own dissector there, so whatever dissects a packet there
 * (a tun or tap device finding the transport header, a qdisc or RPS hashing a flow)
 * gets the keys it fills in from the IP and UDP/TCP headers, read with
 * bpf_skb_load_bytes (tests/conformance/test_flow_dissector.py). UDP datagrams to the
 * port user space set in .bss are counted, with the ports the program found. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800

__u32 port;		/* set by user space, host order */
__u64 dissected;	/* our datagrams */
__u32 last_sport, last_dport, last_thoff;

SEC("flow_dissector")
int dissect(struct __sk_buff *skb)
{
	struct bpf_flow_keys *keys = skb->flow_keys;
	struct iphdr ip;
	__u16 ports[2];

	if (keys->n_proto != bpf_htons(ETH_P_IP))
		return BPF_DROP;
	if (bpf_skb_load_bytes(skb, keys->nhoff, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl < 5)
		return BPF_DROP;
	keys->addr_proto = ETH_P_IP;
	keys->ipv4_src = ip.saddr;
	keys->ipv4_dst = ip.daddr;
	keys->ip_proto = ip.protocol;
	keys->thoff = keys->nhoff + ip.ihl * 4;
	if (ip.frag_off & bpf_htons(0x3fff)) {
		keys->is_frag = 1;
		return BPF_OK;
	}
	if (ip.protocol != IPPROTO_UDP && ip.protocol != IPPROTO_TCP)
		return BPF_OK;
	if (bpf_skb_load_bytes(skb, keys->thoff, ports, sizeof(ports)))
		return BPF_DROP;
	keys->sport = ports[0];
	keys->dport = ports[1];
	if (ip.protocol == IPPROTO_UDP && ports[1] == bpf_htons(port)) {
		__sync_fetch_and_add(&dissected, 1);
		last_sport = bpf_ntohs(ports[0]);
		last_dport = bpf_ntohs(ports[1]);
		last_thoff = keys->thoff;
	}
	return BPF_OK;
}

char LICENSE[] SEC("license") = "GPL";
