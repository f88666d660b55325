// SPDX-License-Identifier: GPL-2.0
/* A BPF LSM program on the file_open hook (SEC("lsm/file_open")) that denies
 * one process the opening of files whose name starts with "lsm-deny-", with
 * -EPERM. Opens and denials are counted in a hash map value guarded by a
 * bpf_spin_lock (tests/conformance/test_lsm.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define EPERM 1
#define NAME_LEN 32

struct counts {
	struct bpf_spin_lock lock;
	__u32 opens;
	__u32 denied;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counts);
} counters SEC(".maps");

/* Set by user space after load: the only process this hook judges. */
__u32 target_tgid;

static bool denied_name(const char *name)
{
	const char prefix[] = "lsm-deny-";

	for (int i = 0; i < sizeof(prefix) - 1; i++)
		if (name[i] != prefix[i])
			return false;
	return true;
}

SEC("lsm/file_open")
int BPF_PROG(deny_open, struct file *file, int ret)
{
	char name[NAME_LEN] = {};
	struct counts *c;
	__u32 key = 0;
	bool deny;

	if (ret != 0)
		return ret; /* an earlier BPF LSM program decided */
	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	bpf_probe_read_kernel_str(name, sizeof(name), BPF_CORE_READ(file, f_path.dentry, d_name.name));
	deny = denied_name(name);

	c = bpf_map_lookup_elem(&counters, &key);
	if (!c)
		return 0;
	bpf_spin_lock(&c->lock);
	c->opens++;
	if (deny)
		c->denied++;
	bpf_spin_unlock(&c->lock);

	/* Two returns of constants: the verifier checks that an LSM program returns 0
	 * or -errno (Linux 6.10), and cannot bound a computed `-deny`. */
	if (deny) {
		bpf_printk("lsm file_open: %s denied", name);
		return -EPERM;
	}
	bpf_printk("lsm file_open: %s allowed", name);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
