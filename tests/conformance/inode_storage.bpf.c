// SPDX-License-Identifier: GPL-2.0
/* A BPF LSM program on the file_open hook (SEC("lsm/file_open")) that keeps
 * per-inode state in inode-local storage (BPF_MAP_TYPE_INODE_STORAGE,
 * bpf_inode_storage_get): how often one process opened the file, and the flags of
 * its last open. User space names the inode to watch in target_ino (.bss) and
 * reads the storage back with an fd of the file as the key
 * (tests/conformance/test_inode_storage.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

struct open_stats {
	__u32 opens;
	__u32 last_flags;
	__u32 last_tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_INODE_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct open_stats);
} inode_opens SEC(".maps");

/* Set by user space after load: the inode watched, and the only process counted. */
__u64 target_ino;
__u32 target_tgid;

SEC("lsm/file_open")
int BPF_PROG(count_inode_open, struct file *file, int ret)
{
	struct open_stats *stats;
	__u32 tgid;

	if (ret != 0)
		return ret; /* an earlier BPF LSM program decided */
	if (BPF_CORE_READ(file, f_inode, i_ino) != target_ino)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (tgid != target_tgid)
		return 0;
	stats = bpf_inode_storage_get(&inode_opens, file->f_inode, 0,
				      BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!stats)
		return 0;
	stats->opens++;
	stats->last_flags = file->f_flags;
	stats->last_tgid = tgid;
	bpf_printk("inode %lu: open %u by %u", target_ino, stats->opens, tgid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
