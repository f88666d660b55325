// SPDX-License-Identifier: GPL-2.0
/* Every exec(2) on the machine: the tracepoint sched/sched_process_exec, as
 * libbpf-bootstrap's bootstrap.bpf.c and most exec snoopers do it. Each exec
 * sends one event through a ring buffer (who, whose child, which file) and
 * prints a line to the kernel's trace buffer (tests/conformance/test_exec_tp.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define TASK_COMM_LEN 16
#define MAX_FILENAME_LEN 127

struct exec_event {
	__u32 pid;
	__u32 ppid;
	char comm[TASK_COMM_LEN];
	char filename[MAX_FILENAME_LEN + 1];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

SEC("tp/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int fname_off = ctx->__data_loc_filename & 0xFFFF;
	struct exec_event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;

	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	bpf_probe_read_str(&e->filename, sizeof(e->filename), (void *)ctx + fname_off);
	bpf_printk("exec %s", e->filename);

	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
