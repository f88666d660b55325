// SPDX-License-Identifier: GPL-2.0
/* fork(2)s of one process, seen by a BTF-typed tracepoint (SEC("tp_btf/...")):
 * the parent and child are typed `struct task_struct *`, read directly and with
 * CO-RE. Each child gets task-local storage (BPF_MAP_TYPE_TASK_STORAGE) saying
 * who forked it and when; user space reads it through a pidfd of the child
 * (tests/conformance/test_tp_btf.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

struct fork_info {
	__u32 parent_tgid;
	__u32 child_pid;
	__u64 forked_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fork_info);
} forks SEC(".maps");

/* Set by user space after load: the process whose forks are recorded. */
__u32 target_tgid;
/* Forks recorded. */
__u64 forks_seen;

SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	struct fork_info *info;

	if (parent->tgid != target_tgid)
		return 0;
	info = bpf_task_storage_get(&forks, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!info)
		return 0;
	info->parent_tgid = BPF_CORE_READ(child, real_parent, tgid);
	info->child_pid = child->pid;
	info->forked_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&forks_seen, 1);
	bpf_printk("fork: %d -> %d", parent->pid, child->pid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
