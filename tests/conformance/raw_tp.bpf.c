// SPDX-License-Identifier: GPL-2.0
/* Every exec(2) on the machine, seen by a raw tracepoint (SEC("raw_tp/...")):
 * the tracepoint's own arguments (task, old pid, linux_binprm) untyped, read
 * with CO-RE, the kernel stack that ran the exec (bpf_get_stack), and an event
 * through a ring buffer with a bpf_printk line (tests/conformance/test_raw_tp.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define FILENAME_LEN 64
#define STACK_DEPTH 16

struct exec_event {
	__u32 pid;
	__u32 old_pid;
	__s64 stack_bytes;
	char filename[FILENAME_LEN];
	__u64 stack[STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

SEC("raw_tp/sched_process_exec")
int BPF_PROG(raw_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct exec_event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;

	e->pid = BPF_CORE_READ(p, tgid);
	e->old_pid = old_pid;
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), BPF_CORE_READ(bprm, filename));
	e->stack_bytes = bpf_get_stack(ctx, e->stack, sizeof(e->stack), 0);
	bpf_printk("raw_tp exec: pid=%d %s", e->pid, e->filename);

	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
