// SPDX-License-Identifier: GPL-2.0
/* XDP on the receive path of a veth, with a bpf_timer (tests/conformance/test_xdp.py):
 * for each UDP datagram to the port user space set in .bss, the program counts it and
 * (re)arms a one-shot timer kept in a hash map's value, keyed by the datagram's source
 * port, as a per-flow idle timer is; the timer's callback, which the kernel runs later
 * from an hrtimer in softirq, counts its runs and prints a line. The first packet of a
 * flow makes its element (bpf_map_update_elem) and initialises its timer
 * (bpf_timer_init, bpf_timer_set_callback); every packet starts it again
 * (bpf_timer_start). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define CLOCK_MONOTONIC 1
#define TIMER_NS 1000000 /* 1 ms */

struct timer_slot {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct timer_slot);
} timers SEC(".maps");

/* user space sets `port` (host order) before attaching and reads the counters after */
__u32 port;
__u64 packets;
__u64 timer_runs;

static int on_timer(void *map, __u32 *flow, struct timer_slot *slot)
{
	__u64 n = __sync_fetch_and_add(&timer_runs, 1) + 1;

	bpf_printk("xdp timer: run %llu", n);
	return 0;
}

SEC("xdp")
int xdp_timer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;
	struct timer_slot *slot, fresh = {};
	__u32 flow;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(port))
		return XDP_PASS;
	__sync_fetch_and_add(&packets, 1);

	flow = bpf_ntohs(udp->source);
	slot = bpf_map_lookup_elem(&timers, &flow);
	if (!slot) {
		bpf_map_update_elem(&timers, &flow, &fresh, BPF_NOEXIST);
		slot = bpf_map_lookup_elem(&timers, &flow);
		if (!slot)
			return XDP_PASS;
	}
	/* -EBUSY once initialised: the callback stays set */
	if (bpf_timer_init(&slot->timer, &timers, CLOCK_MONOTONIC) == 0)
		bpf_timer_set_callback(&slot->timer, on_timer);
	bpf_timer_start(&slot->timer, TIMER_NS, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
