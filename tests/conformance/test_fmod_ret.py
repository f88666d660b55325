"""fmod_ret.bpf.c: a modify-return program (SEC("fmod_ret/security_task_getpgid"),
BPF_PROG over the hook's `struct task_struct *` and its return value). It runs
before the LSM hook getpgid(2) asks and, when this process asks about the pid user
space set in .bss, returns -EACCES instead of letting the hook run; the target's
tgid is read with BPF_CORE_READ. (fmod_ret attaches to security_* functions and to
the error-injection list; Debian builds without CONFIG_FUNCTION_ERROR_INJECTION, so
a syscall such as __x64_sys_getpgid is refused: "__x64_sys_getpgid() is not
modifiable", 6.12 guest.)

The test asks for its own process group, which the program refuses, and its
parent's, which it leaves alone, while tracing the program: the PermissionError
(EACCES) user space gets, the .bss counter and the printk line prove the program
ran and its return value reached user space. The trace has to show every helper by
the name the C source wrote.
"""

from __future__ import annotations

import errno
import os
import struct

import pytest

from tests.conformance.evidence import (
    assert_called,
    global_vars,
    printk_lines,
    set_global,
)

PROG = "deny_getpgid"
HELPERS = ("bpf_get_current_pid_tgid", "BPF_CORE_READ", "bpf_printk")


@pytest.mark.program_type("fmod_ret")
def test_fmod_ret_refuses_getpgid_for_user_space(bpf, lbr, built):
    obj = bpf.load(built("fmod_ret"))
    prog = obj.programs[PROG]
    pid, parent = os.getpid(), os.getppid()
    set_global(obj, "target_tgid", pid)
    set_global(obj, "denied_pid", pid)
    wanted = os.getpgid(parent)

    with prog.attach():  # SEC("fmod_ret/security_task_getpgid")
        with lbr.trace(prog) as trace:
            with pytest.raises(PermissionError) as refused:
                os.getpgid(pid)
            allowed = os.getpgid(parent)

    assert refused.value.errno == errno.EACCES
    assert allowed == wanted
    (count,) = struct.unpack("<Q", global_vars(obj)["refused"])
    assert count == 1
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"fmod_ret: getpgid({pid}) -> {-errno.EACCES}" in printed, printed

    text = trace.edges()
    hits = [h for h in trace.hits if h.pid == pid]
    assert len(hits) == 2, text  # one run per getpgid
    if all(h.retval is None for h in hits):
        # 6.1 refuses fexit on a tracing program (the 6.12 guest does not): the trace says so.
        assert any("Cannot recursively attach" in n for n in trace.notes), trace.notes
    else:
        assert sorted(h.retval for h in hits) == [-errno.EACCES, 0], text
    assert_called(trace, "deny_getpgid", HELPERS)
    assert "(unseen caller)" not in text, text
