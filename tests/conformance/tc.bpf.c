// SPDX-License-Identifier: GPL-2.0
/* A tc ingress filter (SEC("tc")) on a veth, moving bytes through dynptrs
 * (tests/conformance/test_tc.py): for each UDP datagram to the port user space set in
 * .bss it loads the payload's head (bpf_skb_load_bytes), writes it into a dynptr over
 * a global buffer (bpf_dynptr_from_mem, bpf_dynptr_write) and reads it back out of the
 * dynptr into `payload` (bpf_dynptr_read), the helpers Linux 5.19 added (so 6.1 has
 * them too). It lets every packet through. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define TC_ACT_OK 0
#define HEAD 16

__u32 port;		/* set by user space (host order) */
__u64 packets;
char scratch[HEAD];	/* the dynptr's memory: a map value (.bss) */
char payload[HEAD];	/* the last datagram's head, read back out of the dynptr */

SEC("tc")
int tc_dynptr(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;
	struct bpf_dynptr ptr;
	char head[HEAD];

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return TC_ACT_OK;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(port))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, sizeof(*eth) + sizeof(*ip) + sizeof(*udp), head, HEAD))
		return TC_ACT_OK;
	if (bpf_dynptr_from_mem(scratch, sizeof(scratch), 0, &ptr))
		return TC_ACT_OK;
	if (bpf_dynptr_write(&ptr, 0, head, HEAD, 0))
		return TC_ACT_OK;
	if (bpf_dynptr_read(payload, HEAD, &ptr, 0, 0))
		return TC_ACT_OK;
	__sync_fetch_and_add(&packets, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
