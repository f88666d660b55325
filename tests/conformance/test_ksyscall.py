"""ksyscall.bpf.c: a kprobe on kill(2) through libbpf's SEC("ksyscall/kill") and
BPF_KSYSCALL (libbpf finds the syscall's kernel function, __x64_sys_kill, and the
macro reads the arguments from the wrapper's pt_regs), a bpf_printk with five
arguments (more than bpf_trace_printk takes: libbpf calls bpf_trace_vprintk) and
a counter in a .bss variable.

The test sends signal 0 to itself while tracing the program; the counter and the
printk line (with the arguments the macro read) prove it ran, and the trace has to
show its helpers by the names the C source wrote.
"""

from __future__ import annotations

import os
import struct
import threading

import pytest

from tests.conformance.evidence import assert_called, printk_lines, section_map

PROG = "kill_entry"
HELPERS = ("bpf_get_current_pid_tgid", "bpf_printk")


@pytest.mark.program_type("ksyscall")
def test_ksyscall_sees_our_kill(bpf, lbr, built):
    obj = bpf.load(built("ksyscall"))
    prog = obj.programs[PROG]
    kills = section_map(obj, ".bss")  # __u64 kills: kill(2)s seen, machine-wide
    pid, tid = os.getpid(), threading.get_native_id()

    with prog.attach():  # SEC("ksyscall/kill")
        (before,) = struct.unpack("<Q", kills[0])
        with lbr.trace(prog) as trace:
            os.kill(pid, 0)  # signal 0: checks only, delivers nothing
        (after,) = struct.unpack("<Q", kills[0])

    assert after > before
    # Its own printk line, with the arguments BPF_KSYSCALL read: our kill(pid, 0).
    wanted = f"kill: pid={pid} sig=0 from tgid={pid} tid={tid} (kill #"
    printed = [line.message for line in printk_lines() if line.tid == tid]
    assert [m for m in printed if m.startswith(wanted)], printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == pid], text
    assert_called(trace, "kill_entry", ("bpf_get_current_pid_tgid", "bpf_printk"))
    assert "(unseen caller)" not in text, text
