// SPDX-License-Identifier: GPL-2.0
/* A netfilter program (SEC("netfilter"), Linux >= 6.4) on the IPv4 LOCAL_IN hook: it
 * reads each packet's IP and UDP headers out of the sk_buff (CO-RE: BPF_CORE_READ for
 * the skb's fields, bpf_probe_read_kernel for the headers), counts UDP datagrams to the
 * port user space set in .bss and accepts every packet
 * (tests/conformance/test_netfilter.py). libbpf 1.1 does not know the section (1.2
 * added it): the harness gives it its type. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define NF_ACCEPT 1

__u32 port;		/* set by user space, host order */
__u64 packets;
__u32 hook;		/* the hook the last one came through (NF_INET_LOCAL_IN: 1) */
__u32 sport;		/* its source port, host order */

SEC("netfilter")
int nf_count(struct bpf_nf_ctx *ctx)
{
	struct sk_buff *skb = ctx->skb;
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	struct iphdr ip;
	struct udphdr udp;

	if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh) || ip.protocol != IPPROTO_UDP)
		return NF_ACCEPT;
	if (bpf_probe_read_kernel(&udp, sizeof(udp), head + nh + ip.ihl * 4))
		return NF_ACCEPT;
	if (udp.dest != bpf_htons(port))
		return NF_ACCEPT;
	__sync_fetch_and_add(&packets, 1);
	hook = BPF_CORE_READ(ctx, state, hook);
	sport = bpf_ntohs(udp.source);
	bpf_printk("netfilter: datagram from port %u at hook %u", sport, hook);
	return NF_ACCEPT;
}

char LICENSE[] SEC("license") = "GPL";
