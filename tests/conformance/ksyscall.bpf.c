// SPDX-License-Identifier: GPL-2.0
/* kill(2) with a kprobe on the syscall, through libbpf's SEC("ksyscall/kill") and
 * BPF_KSYSCALL (which find the syscall's kernel function and read its arguments
 * from the wrapper's pt_regs). bpf_printk with more than 3 arguments: libbpf
 * calls bpf_trace_vprintk for it (tests/conformance/test_ksyscall.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* kill(2)s seen, by every process (the only .bss variable). */
__u64 kills;

SEC("ksyscall/kill")
int BPF_KSYSCALL(kill_entry, pid_t pid, int sig)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u64 n = __sync_fetch_and_add(&kills, 1) + 1;

	bpf_printk("kill: pid=%d sig=%d from tgid=%u tid=%u (kill #%llu)", pid, sig, tgid, tid, n);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
