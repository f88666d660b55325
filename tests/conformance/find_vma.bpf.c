// SPDX-License-Identifier: GPL-2.0
/* An fentry program on hrtimer_nanosleep (SEC("fentry/hrtimer_nanosleep")): when
 * one process goes to sleep, look up which of its mappings holds an address user
 * space chose (bpf_find_vma on the current task, bpf_get_current_task_btf), and
 * keep the mapping's range, offset and file name. The callback runs with the
 * mmap lock held and the vma valid; it reads the name with BPF_CORE_READ and
 * bpf_probe_read_kernel_str (tests/conformance/test_find_vma.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define NAME_LEN 32

struct vma_info {
	__u64 start;
	__u64 end;
	__u64 pgoff;
	char file[NAME_LEN];
};

/* Set by user space after load: the process, and the address looked up in it. */
__u32 target_tgid;
__u64 target_addr;
/* What the last lookup found, and how many lookups found it. */
struct vma_info found;
__u64 lookups;

static long record_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_info *info = data;

	info->start = vma->vm_start;
	info->end = vma->vm_end;
	info->pgoff = vma->vm_pgoff;
	if (vma->vm_file)
		bpf_probe_read_kernel_str(info->file, sizeof(info->file),
					  BPF_CORE_READ(vma, vm_file, f_path.dentry, d_name.name));
	return 0;
}

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(lookup_vma)
{
	struct vma_info info = {};
	struct task_struct *task;
	long err;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	task = bpf_get_current_task_btf();
	/* The callback's context is on this stack (the helper takes no other). */
	err = bpf_find_vma(task, target_addr, record_vma, &info, 0);
	if (err) {
		bpf_printk("find_vma %lx: error %ld", target_addr, err);
		return 0;
	}
	found = info;
	lookups++;
	bpf_printk("find_vma %lx: %s", target_addr, info.file);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
