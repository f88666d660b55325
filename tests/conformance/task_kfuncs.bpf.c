// SPDX-License-Identifier: GPL-2.0
/* kfuncs in a BTF-typed tracepoint (SEC("tp_btf/sched_process_fork")): the child
 * of one process is held with bpf_task_acquire / bpf_task_release, and its
 * real_parent (an __rcu pointer) read inside bpf_rcu_read_lock /
 * bpf_rcu_read_unlock. These kfuncs came with Linux 6.2 (bpf_task_acquire:
 * commit 90660309b0c7, "bpf: Add kfuncs for storing struct task_struct * as a
 * kptr"; bpf_rcu_read_lock: commit 9bb00b2895cb, "bpf: Add kfunc
 * bpf_rcu_read_lock/unlock()") (tests/conformance/test_tp_btf.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

extern struct task_struct *bpf_task_acquire(struct task_struct *p) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

/* Set by user space after load: the process whose forks are looked at. */
__u32 target_tgid;
/* The last child's pid and its real parent's tgid, read through the kfuncs. */
__u32 child_pid;
__u32 parent_tgid;

SEC("tp_btf/sched_process_fork")
int BPF_PROG(fork_kfuncs, struct task_struct *parent, struct task_struct *child)
{
	struct task_struct *held, *real_parent;

	if (parent->tgid != target_tgid)
		return 0;
	held = bpf_task_acquire(child);
	if (!held)
		return 0;
	bpf_rcu_read_lock();
	real_parent = held->real_parent;
	if (real_parent)
		parent_tgid = real_parent->tgid;
	bpf_rcu_read_unlock();
	child_pid = held->pid;
	bpf_task_release(held);
	bpf_printk("kfuncs: child %d of %d", child_pid, parent_tgid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
