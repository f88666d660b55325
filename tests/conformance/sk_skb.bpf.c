// SPDX-License-Identifier: GPL-2.0
/* A sockmap that sees what one TCP connection over loopback receives, as a
 * sockmap-based proxy sets it up (tests/conformance/test_sk_skb.py):
 *  - sockops, on the listener's side of the established connection (the port user
 *    space set in .bss), stamps the socket with socket-local storage
 *    (bpf_sk_storage_get: sk_skb programs may not call it, sockops may) and puts it
 *    into the sockmap;
 *  - sk_skb/stream_verdict, attached to that sockmap, runs for every skb the socket
 *    receives: it counts them and their bytes, keeps the last one's head and lets it
 *    through to the socket (SK_PASS). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define HEAD 8

struct stamp {
	__u64 established_ns;
	__u32 local_port;
	__u32 skbs; /* counted by nobody but sockops: 0 */
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stamp);
} stamps SEC(".maps");

__u32 port;		/* the listener's, host order: set by user space */
__u64 established;	/* sockets sockops stamped and put in the sockmap */
__u64 verdicts;		/* skbs the verdict program saw, and their bytes */
__u64 bytes;
char head[HEAD];	/* the last skb's first bytes */

SEC("sockops")
int stamp_sock(struct bpf_sock_ops *ops)
{
	struct bpf_sock *sk = ops->sk;
	struct stamp *st;
	__u32 key = 0;

	if (ops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB || ops->local_port != port || !sk)
		return 1;
	st = bpf_sk_storage_get(&stamps, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 1;
	st->established_ns = bpf_ktime_get_ns();
	st->local_port = ops->local_port;
	if (bpf_sock_map_update(ops, &socks, &key, BPF_ANY) == 0)
		__sync_fetch_and_add(&established, 1);
	return 1;
}

SEC("sk_skb/stream_verdict")
int verdict(struct __sk_buff *skb)
{
	__u32 len = skb->len;

	if (len >= HEAD)
		bpf_skb_load_bytes(skb, 0, head, HEAD);
	__sync_fetch_and_add(&verdicts, 1);
	__sync_fetch_and_add(&bytes, len);
	bpf_printk("sk_skb verdict: %u bytes", len);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
