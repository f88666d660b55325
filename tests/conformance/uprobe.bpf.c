// SPDX-License-Identifier: GPL-2.0
/* getpid() of the C library seen by a uprobe and a uretprobe, auto-attached by
 * libbpf from the section name (SEC("uprobe/libc.so.6:getpid"): libbpf finds
 * libc.so.6 in the library paths). The entry counts the calls and prints a line;
 * the return sends the thread, getpid's return value and the user stack through
 * a ring buffer (tests/conformance/test_uprobe.py). BPF_KPROBE/BPF_KRETPROBE are
 * the macros for uprobes in libbpf 1.1 (BPF_UPROBE came later). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define STACK_DEPTH 8

struct getpid_event {
	__u32 tid;
	__s32 ret;
	__s64 stack_bytes;
	__u64 stack[STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

/* Set by user space after load: the process whose calls are seen. */
__u32 target_tgid;
/* getpid() calls seen on entry. */
__u64 calls;

SEC("uprobe/libc.so.6:getpid")
int BPF_KPROBE(getpid_enter)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (id >> 32 != target_tgid)
		return 0;
	__sync_fetch_and_add(&calls, 1);
	bpf_printk("uprobe getpid: tid=%u", (__u32)id);
	return 0;
}

SEC("uretprobe/libc.so.6:getpid")
int BPF_KRETPROBE(getpid_return, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct getpid_event *e;

	if (id >> 32 != target_tgid)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->tid = (__u32)id;
	e->ret = ret;
	e->stack_bytes = bpf_get_stack(ctx, e->stack, sizeof(e->stack), BPF_F_USER_STACK);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
