"""uprobe.bpf.c: a uprobe and a uretprobe on the C library's getpid, auto-attached
by libbpf from the section names (SEC("uprobe/libc.so.6:getpid"),
SEC("uretprobe/libc.so.6:getpid"): libbpf finds libc.so.6 in the library paths,
/lib/x86_64-linux-gnu on Debian). The entry counts calls in .bss and prints a line;
the return sends the thread, getpid's return value and the user stack
(bpf_get_stack with BPF_F_USER_STACK) through a ring buffer.

The test calls getpid() (os.getpid: glibc's, uncached) while tracing both programs:
the counter, the printk line and the ring buffer record (our pid as getpid's return,
a user-space stack) prove both ran in this thread; the trace has to show every
helper of each program by the name the C source wrote.
"""

from __future__ import annotations

import os
import struct
import threading

import pytest

from tests.conformance.evidence import (
    assert_called,
    global_vars,
    printk_lines,
    ring_buffer_records,
    set_global,
)

STACK_DEPTH = 8
#: struct getpid_event: tid, ret, stack_bytes, stack[8].
EVENT = struct.Struct(f"<Iiq{STACK_DEPTH}Q")
ENTER_HELPERS = ("bpf_get_current_pid_tgid", "bpf_printk")
RETURN_HELPERS = (
    "bpf_get_current_pid_tgid",
    "bpf_ringbuf_reserve",
    "bpf_get_stack",
    "bpf_ringbuf_submit",
)
#: Where x86-64 user space ends.
USER_SPACE_END = 0x0000_8000_0000_0000


@pytest.mark.program_type("uprobe")
def test_uprobe_and_uretprobe_see_our_getpid(bpf, lbr, built):
    obj = bpf.load(built("uprobe"))
    pid, tid = os.getpid(), threading.get_native_id()
    set_global(obj, "target_tgid", pid)
    enter, ret = obj.programs["getpid_enter"], obj.programs["getpid_return"]

    with enter.attach(), ret.attach():  # SEC("uprobe/libc.so.6:getpid"), SEC("uretprobe/...")
        with lbr.trace(enter, ret) as trace:
            got = os.getpid()
    assert got == pid

    (calls,) = struct.unpack("<Q", global_vars(obj)["calls"])
    assert calls >= 1
    events = [EVENT.unpack(r) for r in ring_buffer_records(obj.maps["events"])]
    assert (tid, pid) in [(e[0], e[1]) for e in events], events
    ev_tid, ev_ret, stack_bytes, *stack = next(e for e in events if e[0] == tid)
    assert stack_bytes > 0 and stack_bytes % 8 == 0, stack_bytes
    assert all(0 < ip < USER_SPACE_END for ip in stack[: stack_bytes // 8]), stack
    printed = [line.message for line in printk_lines() if line.tid == tid]
    assert f"uprobe getpid: tid={tid}" in printed, printed

    text = trace.edges()
    assert {h.target for h in trace.hits} == {
        "prog:name:getpid_enter",
        "prog:name:getpid_return",
    }, text
    assert_called(trace, "getpid_enter", ("bpf_get_current_pid_tgid", "bpf_printk"))
    assert_called(
        trace,
        "getpid_return",
        (
            "bpf_get_current_pid_tgid",
            "bpf_ringbuf_reserve",
            "bpf_get_stack",
            "bpf_ringbuf_submit",
        ),
    )
    assert "(unseen caller)" not in text, text
