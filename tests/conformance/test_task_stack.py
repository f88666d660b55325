"""task_stack.bpf.c: a task iterator (SEC("iter/task")) that dumps the kernel stack
of one process's threads with bpf_get_task_stack: per thread a text line
(BPF_SEQ_PRINTF) and a binary record of its return addresses (bpf_seq_write), and
a .bss count of the threads dumped.

The test starts a child (`sleep`), waits until it sleeps, points the iterator at it
and runs it (`prog.iterate()`, in this thread) while tracing it: the child's line
and a stack whose frames are kernel functions of a sleep in nanosleep (named
through /proc/kallsyms), and the counter, prove the program ran on it; the trace
has to show every helper by the name the C source wrote.
"""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

import pytest

from pytest_lbr.symbols import get_symbolizer
from tests.conformance.evidence import assert_called, global_vars, set_global

PROG = "dump_stack"
MAX_DEPTH = 16
#: struct task_stack: pid, nr, ips[16].
RECORD = struct.Struct(f"<II{MAX_DEPTH}Q")
HELPERS = ("bpf_get_task_stack", "BPF_SEQ_PRINTF", "bpf_seq_write")


def wait_asleep(pid: int, comm: str) -> None:
    """Until process `pid` runs `comm` (its exec done) and sleeps (state S)."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        name, _, rest = stat.read_text().rpartition(")")
        if name.endswith(f"({comm}") and rest.split()[0] == "S":
            return
        time.sleep(0.02)
    raise AssertionError(f"{pid} never slept as {comm}: {stat.read_text()}")


@pytest.mark.program_type("iter/task (task stack)")
def test_task_iterator_dumps_a_sleeping_childs_kernel_stack(bpf, lbr, built):
    obj = bpf.load(built("task_stack"))
    prog = obj.programs[PROG]
    child = subprocess.Popen(["sleep", "60"])
    try:
        wait_asleep(child.pid, "sleep")
        set_global(obj, "target_tgid", child.pid)
        with lbr.trace(prog) as trace:
            out = prog.iterate()
    finally:
        child.kill()
        child.wait()

    # What the program wrote: the child's one thread, its line then its record.
    line, _, record = out.partition(b"\n")
    pid, nr, *ips = RECORD.unpack(record)
    assert line == f"{child.pid} sleep: {nr} frames".encode(), out
    assert pid == child.pid and 0 < nr <= MAX_DEPTH, (pid, nr)
    names = [loc.symbol for loc in get_symbolizer().locate_many(ips[:nr]).values()]
    assert any("nanosleep" in str(n) for n in names), names
    assert int.from_bytes(global_vars(obj)["dumped"], "little") == 1

    text = trace.edges()
    assert trace.hits, text
    assert_called(trace, PROG, HELPERS)
    assert "(unseen caller)" not in text, text
