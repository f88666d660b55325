// SPDX-License-Identifier: GPL-2.0
/* unlink(2) timed with a kprobe and a kretprobe on do_unlinkat, as the
 * BCC-style latency tools are: the entry stores a start time and the file name
 * in a hash map keyed by thread, the return looks it up, sends an event through
 * a perf event array (bpf_perf_event_output) and deletes the entry
 * (tests/conformance/test_kprobe.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define FILENAME_LEN 64

struct start {
	__u64 ts;
	char filename[FILENAME_LEN];
};

struct unlink_event {
	__u32 pid;
	__s32 ret;
	__u64 delta_ns;
	char filename[FILENAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct start);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(int));
	__uint(value_size, sizeof(int));
} events SEC(".maps");

/* Set by user space after load: the process whose unlinks are timed. */
__u32 target_tgid;

SEC("kprobe/do_unlinkat")
int BPF_KPROBE(unlink_enter, int dfd, struct filename *name)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct start s = {};

	if (id >> 32 != target_tgid)
		return 0;
	s.ts = bpf_ktime_get_ns();
	bpf_probe_read_kernel_str(s.filename, sizeof(s.filename), BPF_CORE_READ(name, name));
	bpf_map_update_elem(&starts, &tid, &s, BPF_ANY);
	return 0;
}

SEC("kretprobe/do_unlinkat")
int BPF_KRETPROBE(unlink_return, long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct unlink_event e = {};
	struct start *s;

	s = bpf_map_lookup_elem(&starts, &tid);
	if (!s)
		return 0;
	e.pid = id >> 32;
	e.ret = ret;
	e.delta_ns = bpf_ktime_get_ns() - s->ts;
	__builtin_memcpy(e.filename, s->filename, sizeof(e.filename));
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &e, sizeof(e));
	bpf_map_delete_elem(&starts, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
