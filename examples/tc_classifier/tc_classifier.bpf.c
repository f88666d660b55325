// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A tc (sched_cls, direct-action) egress classifier: look the destination port
 * up in a hash map, put the packet in that tc class and re-mark its DSCP,
 * fixing the IPv4 header checksum. */
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "tc_classifier.h"

#define IP_OFF sizeof(struct ethhdr)
#define TOS_OFF (IP_OFF + offsetof(struct iphdr, tos))
#define CSUM_OFF (IP_OFF + offsetof(struct iphdr, check))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u16);
	__type(value, struct port_class);
} classes SEC(".maps");

SEC("tc")
int tc_classifier(struct __sk_buff *skb)
{
	struct port_class *pc;
	struct iphdr ip;
	__u16 ports[2];	/* source, destination: the same place in TCP and UDP */
	__u16 dport;
	__u8 tos;

	/* Copy the headers out: they may not be in the linear part of the skb. */
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, IP_OFF, &ip, sizeof(ip)) || ip.ihl != 5)
		return TC_ACT_OK;
	if (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, IP_OFF + sizeof(ip), ports, sizeof(ports)))
		return TC_ACT_OK;

	dport = bpf_ntohs(ports[1]);
	pc = bpf_map_lookup_elem(&classes, &dport);
	if (!pc)
		return TC_ACT_OK;	/* unclassified: the qdisc's default class */

	/* Re-mark DSCP, keep ECN; the checksum changes by the 16-bit word around tos. */
	tos = (pc->dscp << 2) | (ip.tos & 3);
	if (tos != ip.tos) {
		__be16 old = bpf_htons((ip.version << 12) | (ip.ihl << 8) | ip.tos);
		__be16 new = bpf_htons((ip.version << 12) | (ip.ihl << 8) | tos);

		if (bpf_l3_csum_replace(skb, CSUM_OFF, old, new, sizeof(new)))
			return TC_ACT_SHOT;
		if (bpf_skb_store_bytes(skb, TOS_OFF, &tos, sizeof(tos), 0))
			return TC_ACT_SHOT;
	}
	skb->tc_classid = pc->classid;
	skb->priority = pc->classid;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
