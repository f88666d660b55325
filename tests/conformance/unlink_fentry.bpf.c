// SPDX-License-Identifier: GPL-2.0
/* unlink(2) seen on the way into and out of do_unlinkat, with fentry and fexit
 * (BPF trampolines), as libbpf-bootstrap's fentry.bpf.c does. User space sets
 * the process to watch in target_tgid (.bss) after load; 0 watches every one.
 * The lines go to the kernel's trace buffer (tests/conformance/test_unlink_fentry.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* The only .bss variable: the test writes it through the object's .bss map. */
__u32 target_tgid;

SEC("fentry/do_unlinkat")
int BPF_PROG(unlink_entry, int dfd, struct filename *name)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (target_tgid && tgid != target_tgid)
		return 0;
	bpf_printk("fentry: pid = %d, filename = %s", tgid, name->name);
	return 0;
}

SEC("fexit/do_unlinkat")
int BPF_PROG(unlink_exit, int dfd, struct filename *name, long ret)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (target_tgid && tgid != target_tgid)
		return 0;
	/* name was put by now: print the result only */
	bpf_printk("fexit: pid = %d, ret = %ld", tgid, ret);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
