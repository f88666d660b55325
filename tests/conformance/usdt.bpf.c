// SPDX-License-Identifier: GPL-2.0
/* A USDT program (SEC("usdt")) on the lbr_demo:tick probe of a small program of the
 * test's own (usdt_target.c: DTRACE_PROBE2(lbr_demo, tick, i, value)). BPF_USDT
 * (libbpf's usdt.bpf.h) gives the probe's arguments by name, wherever the
 * compiler put them; each tick goes to a ring buffer with the process that fired it,
 * is counted in .bss, and printed. A bare SEC("usdt") is attached from user space
 * with bpf_program__attach_usdt (tests/conformance/test_usdt.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

struct tick_event {
	__u32 pid;
	__s32 seq;
	__s64 value;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} ticks SEC(".maps");

/* Ticks seen. */
__u64 seen;

SEC("usdt")
int BPF_USDT(on_tick, int seq, long value)
{
	struct tick_event *e;

	__sync_fetch_and_add(&seen, 1);
	e = bpf_ringbuf_reserve(&ticks, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->seq = seq;
	e->value = value;
	bpf_ringbuf_submit(e, 0);
	bpf_printk("usdt lbr_demo:tick: seq=%d value=%ld", seq, value);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
