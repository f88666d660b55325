// SPDX-License-Identifier: GPL-2.0
/* A tcx ingress program (SEC("tcx/ingress"), Linux >= 6.6): a sched_cls program on an
 * interface's tcx hook, a BPF link of its own, with no qdisc
 * (tests/conformance/test_tcx.py). It counts UDP datagrams to the port user space set
 * in .bss, keeps the last one's payload head and passes every packet on. libbpf 1.1
 * does not know the section (1.3 added it): the harness gives it its type. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define TCX_PASS 0
#define HEAD 8

__u32 port;		/* set by user space, host order */
__u64 packets;
char head[HEAD];

SEC("tcx/ingress")
int tcx_count(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TCX_PASS;
	if (ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return TCX_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(port))
		return TCX_PASS;
	bpf_skb_load_bytes(skb, sizeof(*eth) + sizeof(*ip) + sizeof(*udp), head, HEAD);
	__sync_fetch_and_add(&packets, 1);
	bpf_printk("tcx ingress: %u bytes on ifindex %u", skb->len, skb->ifindex);
	return TCX_PASS;
}

char LICENSE[] SEC("license") = "GPL";
