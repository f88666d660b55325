// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Count write(2)s per process: a kprobe on vfs_write, which every write goes
 * through, whoever makes it. BPF programs see every process; this one keeps a
 * counter per process id (tgid) and filters nothing (examples/kprobe_child). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Writes per process id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} writes SEC(".maps");

SEC("kprobe/vfs_write")
int write_count(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&writes, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&writes, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
