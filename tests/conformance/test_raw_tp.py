"""raw_tp.bpf.c: a raw tracepoint program (SEC("raw_tp/sched_process_exec")): the
tracepoint's arguments as the kernel passes them (task, old pid, linux_binprm),
untyped, read with BPF_CORE_READ and bpf_probe_read_kernel_str; the kernel stack of
the exec with bpf_get_stack; an event through a ring buffer and a bpf_printk line.

The test starts /bin/true as a child while tracing its children: the program runs
in the child, in its exec. Its own ring buffer event (the child's pid, the file, a
kernel stack) and its printk line prove it ran there; the trace has to show every
helper by the name the C source wrote.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from tests.conformance.evidence import (
    assert_call_lines,
    assert_called,
    printk_lines,
    ring_buffer_records,
)

PROG = "raw_exec"
TRUE = "/bin/true"
STACK_DEPTH = 16
#: struct exec_event: pid, old_pid, stack_bytes, filename[64], stack[16].
EVENT = struct.Struct(f"<IIq64s{STACK_DEPTH}Q")
HELPERS = (
    "bpf_ringbuf_reserve",
    "BPF_CORE_READ",
    "bpf_probe_read_kernel_str",
    "bpf_get_stack",
    "bpf_printk",
    "bpf_ringbuf_submit",
)
#: Where x86-64 kernel text lives (the top half of the address space).
KERNEL_SPACE = 0xFFFF_8000_0000_0000


def cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@pytest.mark.program_type("raw_tp")
def test_raw_tracepoint_sees_the_childs_exec(bpf, lbr, built):
    obj = bpf.load(built("raw_tp"))
    prog = obj.programs[PROG]

    with prog.attach():  # SEC("raw_tp/sched_process_exec")
        with lbr.trace(prog, scope="children") as trace:
            child = subprocess.Popen([TRUE])
            assert child.wait() == 0

    events = [EVENT.unpack(r) for r in ring_buffer_records(obj.maps["events"])]
    ours = [e for e in events if e[0] == child.pid]
    assert len(ours) == 1, events
    pid, old_pid, stack_bytes, filename, *stack = ours[0]
    # Not threaded: the exec keeps its pid. The file is the one the child ran.
    assert (old_pid, cstr(filename)) == (child.pid, TRUE), ours
    # A kernel stack: whole entries, every one an address of kernel text.
    assert stack_bytes > 0 and stack_bytes % 8 == 0, stack_bytes
    assert all(ip >= KERNEL_SPACE for ip in stack[: stack_bytes // 8]), [hex(i) for i in stack]
    printed = [line for line in printk_lines() if line.tid == child.pid]
    assert [line.message for line in printed] == [f"raw_tp exec: pid={child.pid} {TRUE}"], printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == child.pid], text
    assert_called(trace, "raw_exec", HELPERS)
    # Each call at its own line (not the next statement's: bpf_ringbuf_submit's).
    source = Path(__file__).with_name("raw_tp.bpf.c")
    assert_call_lines(trace, "raw_exec", "bpf_printk", source)
    assert_call_lines(trace, "raw_exec", "bpf_ringbuf_submit", source)
    assert "(unseen caller)" not in text, text
