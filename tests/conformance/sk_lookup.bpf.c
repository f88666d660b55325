// SPDX-License-Identifier: GPL-2.0
/* A socket lookup program (SEC("sk_lookup")), attached to a network namespace: TCP
 * connections to a port nobody listens on (set by user space in .bss) are steered to
 * the listening socket user space put into a sockmap, as a service that accepts on one
 * socket for many ports does (tests/conformance/test_sk_lookup.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} listener SEC(".maps");

__u32 port;		/* the steered port, host order: set by user space */
__u64 steered;		/* lookups given our listener */
__u32 remote_port;	/* the last steered connection's source port, host order */

SEC("sk_lookup")
int steer(struct bpf_sk_lookup *ctx)
{
	struct bpf_sock *sk;
	__u32 key = 0;
	long err;

	if (ctx->protocol != IPPROTO_TCP || ctx->local_port != port)
		return SK_PASS; /* the kernel's own lookup */
	sk = bpf_map_lookup_elem(&listener, &key);
	if (!sk)
		return SK_PASS;
	err = bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	if (err)
		return SK_DROP;
	__sync_fetch_and_add(&steered, 1);
	remote_port = bpf_ntohs(ctx->remote_port);
	bpf_printk("sk_lookup: port %u steered to our listener", ctx->local_port);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
