// SPDX-License-Identifier: GPL-2.0
/* getpgid(2) refused by a BPF program: SEC("fmod_ret/security_task_getpgid")
 * runs before the LSM hook the syscall asks, and for one process asking about
 * the pid user space set in .bss returns -EACCES instead of letting the hook run;
 * the syscall returns that to user space (tests/conformance/test_fmod_ret.py).
 * fmod_ret attaches to security_* functions and to the kernel's error-injection
 * list; Debian's kernels are built without CONFIG_FUNCTION_ERROR_INJECTION, so
 * only the security_* functions are modifiable there. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define EACCES 13

/* Set by user space after load. */
__u32 target_tgid;
__s32 denied_pid;
/* Calls refused. */
__u64 refused;

SEC("fmod_ret/security_task_getpgid")
int BPF_PROG(deny_getpgid, struct task_struct *p, int ret)
{
	pid_t pid;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0; /* 0: run the hook */
	pid = BPF_CORE_READ(p, tgid);
	if (pid != denied_pid)
		return 0;
	__sync_fetch_and_add(&refused, 1);
	bpf_printk("fmod_ret: getpgid(%d) -> %d", pid, -EACCES);
	return -EACCES;
}

char LICENSE[] SEC("license") = "GPL";
