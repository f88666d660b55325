// SPDX-License-Identifier: GPL-2.0
/* A socket filter (SEC("socket")), attached by user space with
 * setsockopt(SO_ATTACH_BPF) to a socket it owns: datagrams starting with the
 * magic "LBR!" are cut to their first KEEP_BYTES bytes (a socket filter returns
 * how much of the packet to keep), others pass whole. It records the cookie and
 * owner uid of the socket it filters for (the kernel runs a socket filter with
 * skb->sk set to that socket) (tests/conformance/test_socket_filter.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define KEEP_BYTES 8

/* What the filter saw: datagrams cut, and its socket's cookie and uid. */
__u64 trimmed;
__u64 socket_cookie;
__u32 socket_uid;

SEC("socket")
int trim_magic(struct __sk_buff *skb)
{
	char head[4];

	if (bpf_skb_load_bytes(skb, 0, head, sizeof(head)) < 0)
		return skb->len;
	if (head[0] != 'L' || head[1] != 'B' || head[2] != 'R' || head[3] != '!')
		return skb->len;
	socket_cookie = bpf_get_socket_cookie(skb);
	socket_uid = bpf_get_socket_uid(skb);
	__sync_fetch_and_add(&trimmed, 1);
	bpf_printk("socket filter: %u bytes cut to %d", skb->len, KEEP_BYTES);
	return KEEP_BYTES;
}

char LICENSE[] SEC("license") = "GPL";
