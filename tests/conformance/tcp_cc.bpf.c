// SPDX-License-Identifier: GPL-2.0
/* A TCP congestion control written in BPF (struct_ops), as the kernel selftests'
 * bpf_cubic and bpf_dctcp are: Reno through the kernel's own kfuncs, plus a
 * count of the sockets that chose it by name with setsockopt(TCP_CONGESTION)
 * (tests/conformance/test_tcp_cc.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/* Sockets initialised, and cong_avoid calls: one .bss variable, laid out as written. */
struct {
	__u64 inits, avoids;
} g;

SEC("struct_ops/lbr_init")
void BPF_PROG(lbr_init, struct sock *sk)
{
	/* No bpf_get_current_pid_tgid: 6.1 does not give it to tcp_ca programs
	 * ("unknown func bpf_get_current_pid_tgid#14" at load, 6.1 guest). */
	__u64 n = __sync_fetch_and_add(&g.inits, 1) + 1;

	bpf_printk("lbr_reno: init #%llu", n);
}

SEC("struct_ops/lbr_ssthresh")
__u32 BPF_PROG(lbr_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/lbr_cong_avoid")
void BPF_PROG(lbr_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	__sync_fetch_and_add(&g.avoids, 1);
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/lbr_undo_cwnd")
__u32 BPF_PROG(lbr_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops lbr_reno = {
	.init = (void *)lbr_init,
	.ssthresh = (void *)lbr_ssthresh,
	.cong_avoid = (void *)lbr_cong_avoid,
	.undo_cwnd = (void *)lbr_undo_cwnd,
	.name = "lbr_reno",
};

char LICENSE[] SEC("license") = "GPL";
