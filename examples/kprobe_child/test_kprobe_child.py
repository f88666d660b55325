"""A kprobe program runs in every process that reaches its function; a trace records
the processes it is told to. Here a child process (a shell) makes the write(2)s:
`scope="children"` records the program's runs in it, the default scope (this
process) leaves them out, and the program's own counter proves it ran either way.

The program is attached where its SEC("kprobe/vfs_write") says (`Program.attach()`),
for the whole test: a real attachment, no BPF_PROG_TEST_RUN.
"""

from __future__ import annotations

import os
import struct
import subprocess

import pytest

#: Three write(2)s to /dev/null: `echo` is a builtin of sh (dash), one write each.
SCRIPT = "echo a >/dev/null; echo b >/dev/null; echo c >/dev/null"
WRITES = 3


@pytest.fixture
def counter(bpf, built):
    obj = bpf.load(built("write_count"))
    with obj.programs["write_count"].attach():  # SEC("kprobe/vfs_write")
        yield obj


def run_child() -> int:
    """Run the shell as a child process; its process id."""
    child = subprocess.Popen(["sh", "-c", SCRIPT])
    assert child.wait() == 0
    return child.pid


def writes_of(obj, pid: int) -> int:
    value = obj.maps["writes"].lookup(pid)
    return 0 if value is None else struct.unpack("<Q", value)[0]


def calls(hit) -> list[str]:
    return [b.dst.symbol for b in hit.branches if b.kind == "call"]


def test_children_scope_records_the_childs_runs(counter, lbr):
    prog = counter.programs["write_count"]

    # The graph backend: the lbr backend's hooks filter by one process in the kernel,
    # so it refuses "children".
    with lbr.trace(prog, scope="children", backend="graph") as trace:
        pid = run_child()

    assert writes_of(counter, pid) == WRITES
    theirs = [h for h in trace.hits if h.pid == pid]
    assert len(theirs) == WRITES, str(trace)
    # In the child's own context (the shell, a task), returning 0 each time.
    assert all(h.comm == "sh" and not h.in_interrupt and h.retval == 0 for h in theirs), str(trace)
    assert trace.called("bpf_get_current_pid_tgid", by="write_count")
    assert trace.called("__htab_map_lookup_elem", by="write_count")
    # The child's first write inserted its counter, the others found it.
    assert ["htab_map_update_elem" in calls(h) for h in theirs] == [True, False, False]
    # Nothing of the machine's other processes.
    assert {h.pid for h in trace.hits} <= {pid, os.getpid()}, str(trace)


def test_process_scope_leaves_the_child_out(counter, lbr):
    prog = counter.programs["write_count"]

    with open(os.devnull, "wb", buffering=0) as null:
        with lbr.trace(prog) as trace:  # scope="process", the default
            pid = run_child()
            null.write(b"x")  # one write of our own

    assert writes_of(counter, pid) == WRITES  # the program did run in the child ...
    assert not [h for h in trace.hits if h.pid == pid], str(trace)  # ... unrecorded
    # ... while our own write's run is recorded.
    assert [h.pid for h in trace.hits] == [os.getpid()], str(trace)
    assert trace.called("bpf_get_current_pid_tgid", by="write_count")
