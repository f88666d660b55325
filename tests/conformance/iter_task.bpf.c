// SPDX-License-Identifier: GPL-2.0
/* A task iterator (SEC("iter/task")): one text line per task (tgid, pid, comm)
 * with BPF_SEQ_PRINTF, then a fixed binary record with bpf_seq_write, and a
 * trailer when the walk ends (task == NULL). Read from the iterator's fd, as
 * `cat` of its pinned file would (tests/conformance/test_iter_task.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* "TSK1" little-endian: the start of every binary record. */
#define TASK_RECORD_MAGIC 0x314b5354

struct task_record {
	__u32 magic;
	__u32 tgid;
	__u32 pid;
	__u32 seq_num;
};

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct task_record rec = {};

	if (!task) {
		BPF_SEQ_PRINTF(seq, "end of tasks\n");
		return 0;
	}
	if (ctx->meta->seq_num == 0)
		BPF_SEQ_PRINTF(seq, "    tgid      pid comm\n");
	BPF_SEQ_PRINTF(seq, "%8d %8d %s\n", task->tgid, task->pid, task->comm);

	rec.magic = TASK_RECORD_MAGIC;
	rec.tgid = task->tgid;
	rec.pid = task->pid;
	rec.seq_num = ctx->meta->seq_num;
	bpf_seq_write(seq, &rec, sizeof(rec));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
