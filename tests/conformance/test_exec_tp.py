"""exec_tp.bpf.c: a tracepoint program on sched/sched_process_exec, written as exec
snoopers are (libbpf-bootstrap's bootstrap.bpf.c): the current task, its parent's
tgid through BPF_CORE_READ, the file name from the tracepoint's __data_loc field
with bpf_probe_read_str, an event through a BPF ring buffer, and a bpf_printk line.

The test starts /bin/true as a child while tracing its children (`scope="children"`):
the program runs in the child, right after its exec. The program's own ring buffer
event and printk line prove it ran there; the trace then has to show every helper
by the name the C source wrote.
"""

from __future__ import annotations

import os
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

PROG = "handle_exec"
TRUE = "/bin/true"
#: struct exec_event: pid, ppid, comm[TASK_COMM_LEN], filename[MAX_FILENAME_LEN + 1].
EVENT = struct.Struct("<II16s128s")
#: Every helper (or libbpf macro that calls one) handle_exec calls, as written.
HELPERS = (
    "bpf_get_current_task",
    "bpf_ringbuf_reserve",
    "bpf_get_current_pid_tgid",
    "BPF_CORE_READ",
    "bpf_get_current_comm",
    "bpf_probe_read_str",
    "bpf_printk",
    "bpf_ringbuf_submit",
)


def cstr(raw: bytes) -> str:
    """A C string of a fixed-size field (ring buffer memory is not zeroed past the NUL)."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@pytest.mark.program_type("tracepoint")
def test_exec_tracepoint_sees_the_childs_exec(bpf, lbr, built):
    obj = bpf.load(built("exec_tp"))
    prog = obj.programs[PROG]

    with prog.attach():  # SEC("tp/sched/sched_process_exec")
        with lbr.trace(prog, scope="children") as trace:
            child = subprocess.Popen([TRUE])
            assert child.wait() == 0

    # The program ran in the child, after its exec: its own ring buffer event ...
    events = [EVENT.unpack(r) for r in ring_buffer_records(obj.maps["events"])]
    ours = [e for e in events if e[0] == child.pid]
    assert len(ours) == 1, events
    _, ppid, comm, filename = ours[0]
    assert (ppid, cstr(comm), cstr(filename)) == (os.getpid(), "true", TRUE), ours
    # ... and its bpf_printk line, written by the child.
    printed = [line for line in printk_lines() if line.tid == child.pid]
    assert [line.message for line in printed] == [f"exec {TRUE}"], printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == child.pid], text
    assert {h.pid for h in trace.hits} <= {child.pid, os.getpid()}, text
    assert_called(trace, PROG, HELPERS)
    assert_call_lines(trace, PROG, "bpf_printk", Path(__file__).with_name("exec_tp.bpf.c"))
    assert "(unseen caller)" not in text, text
