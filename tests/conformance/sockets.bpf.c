// SPDX-License-Identifier: GPL-2.0
/* Socket hooks on one TCP connection over loopback, as a service mesh or a
 * sockmap-accelerated proxy writes them (tests/conformance/test_sockets.py):
 *  - cgroup/connect4 sees the connect(2) to the port user space set in .bss;
 *  - cgroup_skb/egress reads each packet's IP and TCP headers;
 *  - sockops puts both ends of the established connection into a sockmap;
 *  - sk_msg, attached to that sockmap, sees every sendmsg on those sockets.
 * Every hook counts what it saw in .bss and prints one line. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2

/* One .bss variable, so its layout is the struct's: user space sets `port` (the
 * listener's, host order) before attaching and reads the counters after. */
struct {
	__u32 port;
	__u64 connects, packets, established, messages;
} g;

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

SEC("cgroup/connect4")
int on_connect4(struct bpf_sock_addr *ctx)
{
	if (ctx->user_family != AF_INET || ctx->user_port != bpf_htons(g.port))
		return 1;
	__sync_fetch_and_add(&g.connects, 1);
	bpf_printk("connect4: tgid=%u to port %u", bpf_get_current_pid_tgid() >> 32, g.port);
	return 1; /* allow */
}

SEC("cgroup_skb/egress")
int on_egress(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct tcphdr tcp;

	if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)) || ip.protocol != IPPROTO_TCP)
		return 1;
	if (bpf_skb_load_bytes(skb, ip.ihl * 4, &tcp, sizeof(tcp)))
		return 1;
	if (tcp.dest == bpf_htons(g.port) || tcp.source == bpf_htons(g.port))
		__sync_fetch_and_add(&g.packets, 1);
	return 1; /* pass */
}

SEC("sockops")
int on_sockops(struct bpf_sock_ops *ops)
{
	__u32 key;

	if (ops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    ops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	/* local_port is in host order, remote_port in network order */
	if (ops->local_port != g.port && ops->remote_port != bpf_htonl(g.port))
		return 1;
	key = ops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB;
	if (bpf_sock_map_update(ops, &socks, &key, BPF_ANY) == 0)
		__sync_fetch_and_add(&g.established, 1);
	bpf_printk("sockops: op=%u key=%u", ops->op, key);
	return 1;
}

SEC("sk_msg")
int on_msg(struct sk_msg_md *msg)
{
	__sync_fetch_and_add(&g.messages, 1);
	bpf_printk("sk_msg: %u bytes to port %u", msg->size, bpf_ntohl(msg->remote_port));
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
