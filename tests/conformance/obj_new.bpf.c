// SPDX-License-Identifier: GPL-2.0
/* Allocated objects (bpf_obj_new_impl / bpf_obj_drop_impl, kfuncs of Linux 6.2:
 * commit 958cf2e273f0, "bpf: Introduce bpf_obj_new", and ac9f06050a35, "bpf:
 * Introduce bpf_obj_drop") in an fentry program on vfs_fsync_range
 * (SEC("fentry/vfs_fsync_range")): per fsync of one process, a record of a type
 * of this program's BTF is allocated, filled, summarised into .bss and dropped.
 * libbpf 1.1 ships no bpf_experimental.h, so the bpf_obj_new / bpf_obj_drop
 * macros are written here (tests/conformance/test_obj_new.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

extern void *bpf_obj_new_impl(__u64 local_type_id, void *meta) __ksym;
extern void bpf_obj_drop_impl(void *kptr, void *meta) __ksym;

/* A zeroed object of `type`, named by its id in this program's BTF (the kernel
 * fills in the meta argument). */
#define bpf_obj_new(type) ((type *)bpf_obj_new_impl(bpf_core_type_id_local(type), NULL))
#define bpf_obj_drop(obj) bpf_obj_drop_impl(obj, NULL)

/* Every member 8 bytes: `last = *rec` may be compiled into 8-byte loads, and the
 * verifier refuses a load of an allocated object that spans two members. */
struct fsync_record {
	__u64 ino;
	__s64 start;
	__s64 end;
	__u64 tgid;
	__s64 datasync;
};

/* Set by user space after load: the process whose fsyncs are recorded. */
__u32 target_tgid;
/* The last record, copied out of the object before it was dropped; the count. */
struct fsync_record last;
__u64 records;

SEC("fentry/vfs_fsync_range")
int BPF_PROG(record_fsync, struct file *file, loff_t start, loff_t end, int datasync)
{
	struct fsync_record *rec;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (tgid != target_tgid)
		return 0;
	rec = bpf_obj_new(struct fsync_record);
	if (!rec)
		return 0;
	rec->ino = BPF_CORE_READ(file, f_inode, i_ino);
	rec->start = start;
	rec->end = end;
	rec->tgid = tgid;
	rec->datasync = datasync;
	last = *rec;
	records++;
	bpf_printk("obj_new: fsync of inode %llu by %llu", rec->ino, rec->tgid);
	bpf_obj_drop(rec);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
