// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What one process does that a user's program would count as its own: the
 * directories it makes and removes (kprobes on do_mkdirat and do_rmdir, the
 * functions mkdir(2)/mkdirat(2) and rmdir(2) reach) and the processes and threads
 * it starts (the sched_process_fork tracepoint, which fires in the parent). Each
 * program counts the calls of one tgid, set in `target` (key 0) by user space,
 * into its slot of `counts` (see tests/bpf/README). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define OWN_MKDIR 0
#define OWN_RMDIR 1
#define OWN_FORK 2

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u32 zero = 0;
	__u32 *tgid = bpf_map_lookup_elem(&target, &zero);
	__u64 *n;

	if (!tgid || *tgid != bpf_get_current_pid_tgid() >> 32)
		return;
	n = bpf_map_lookup_elem(&counts, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("kprobe/do_mkdirat")
int own_mkdir(void *ctx)
{
	count(OWN_MKDIR);
	return 0;
}

SEC("kprobe/do_rmdir")
int own_rmdir(void *ctx)
{
	count(OWN_RMDIR);
	return 0;
}

SEC("tp/sched/sched_process_fork")
int own_fork(void *ctx)
{
	count(OWN_FORK);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
