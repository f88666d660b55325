// SPDX-License-Identifier: GPL-2.0
/* A socket-selection program for a SO_REUSEPORT group (SEC("sk_reuseport")): it
 * counts the datagrams it sees and lets the kernel pick the socket as usual
 * (tests/conformance/test_reuseport.py). libbpf has no auto-attach for it: user
 * space puts it on a socket of the group with SO_ATTACH_REUSEPORT_EBPF. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* Datagrams seen, and the last one's length: one .bss variable. */
struct {
	__u64 seen;
	__u32 len;
} g;

SEC("sk_reuseport")
int pick_socket(struct sk_reuseport_md *md)
{
	__u64 n = __sync_fetch_and_add(&g.seen, 1) + 1;

	g.len = md->len;
	bpf_printk("reuseport: datagram #%llu, %u bytes", n, md->len);
	return SK_PASS; /* no bpf_sk_select_reuseport: the kernel's own pick */
}

char LICENSE[] SEC("license") = "GPL";
