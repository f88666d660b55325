// SPDX-License-Identifier: GPL-2.0
/* One program on several kernel functions at once: SEC("kprobe.multi/do_*dir*")
 * (libbpf expands the glob; the kernel attaches it with one fprobe link). It
 * tells the functions apart by bpf_get_func_ip and counts one process's calls of
 * each in a hash map keyed by that address (tests/conformance/test_kprobe_multi.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} calls SEC(".maps");

/* Set by user space after load: the process whose calls are counted. */
__u32 target_tgid;

SEC("kprobe.multi/do_*dir*")
int count_dir_ops(struct pt_regs *ctx)
{
	__u64 ip, one = 1, *count;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	ip = bpf_get_func_ip(ctx);
	count = bpf_map_lookup_elem(&calls, &ip);
	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(&calls, &ip, &one, BPF_NOEXIST);
	bpf_printk("kprobe.multi: %ps", ip);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
