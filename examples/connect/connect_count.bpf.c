// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Count connect(2) calls per process at the syscalls/sys_enter_connect
 * tracepoint: the kind of program a connection monitor starts from. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Process (tgid) -> connect() calls. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);
	__type(value, __u64);
} connects SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_connect")
int count_connect(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&connects, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&connects, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
