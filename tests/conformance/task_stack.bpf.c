// SPDX-License-Identifier: GPL-2.0
/* A task iterator (SEC("iter/task")) that dumps the kernel stack of one process's
 * threads with bpf_get_task_stack: per thread a text line (BPF_SEQ_PRINTF) and a
 * binary record of the return addresses, as a "where is it stuck" tool does.
 * User space sets the process in target_tgid (.bss) before the walk
 * (tests/conformance/test_task_stack.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define MAX_DEPTH 16

struct task_stack {
	__u32 pid;
	__u32 nr;
	__u64 ips[MAX_DEPTH];
};

/* Set by user space after load: the process whose threads are dumped. */
__u32 target_tgid;
/* Threads dumped by the last walk. */
__u32 dumped;

SEC("iter/task")
int dump_stack(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct task_stack rec = {};
	long bytes;

	if (!task || task->tgid != target_tgid)
		return 0;
	bytes = bpf_get_task_stack(task, rec.ips, sizeof(rec.ips), 0);
	if (bytes < 0)
		return 0;
	rec.pid = task->pid;
	rec.nr = bytes / sizeof(rec.ips[0]);
	BPF_SEQ_PRINTF(seq, "%d %s: %u frames\n", task->pid, task->comm, rec.nr);
	bpf_seq_write(seq, &rec, sizeof(rec));
	dumped++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
