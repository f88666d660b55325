"""iter_task.bpf.c: a task iterator (SEC("iter/task")): per task a text line with
BPF_SEQ_PRINTF and a fixed binary record with bpf_seq_write, and a trailer when the
walk ends (the program's last run, with task == NULL).

`prog.iterate()` runs it in this process (the read(2)s of the iterator's fd) and
returns what it wrote: our own process is in it, as a line and a record, each
record numbered as the kernel counted the tasks, and the trailer ends it. The
trace has to show both helpers by the names the C source wrote.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.conformance.evidence import assert_called

PROG = "dump_task"
HELPERS = ("BPF_SEQ_PRINTF", "bpf_seq_write")
#: struct task_record: magic "TSK1", tgid, pid, seq_num.
RECORD = struct.Struct("<4sIII")
HEADER = b"    tgid      pid comm"
TRAILER = b"end of tasks\n"


def parse(out: bytes) -> tuple[list[tuple[int, int, str]], list[tuple], bytes]:
    """(lines as (tgid, pid, comm), records, trailer) of the iterator's output: a
    header line, then per task its text line and its binary record, then the trailer."""
    header, _, rest = out.partition(b"\n")
    assert header == HEADER, out[:200]
    lines, records = [], []
    while rest and rest != TRAILER:
        line, _, rest = rest.partition(b"\n")
        tgid, pid, comm = line.split(None, 2)
        lines.append((int(tgid), int(pid), comm.decode(errors="replace")))
        records.append(RECORD.unpack(rest[: RECORD.size]))
        rest = rest[RECORD.size :]
    return lines, records, rest


@pytest.mark.program_type("iter/task")
def test_task_iterator_lists_this_process(bpf, lbr, built):
    obj = bpf.load(built("iter_task"))
    prog = obj.programs[PROG]

    with lbr.trace(prog) as trace:
        out = prog.iterate()

    # What the program wrote: every task, this process among them, and the trailer.
    lines, records, trailer = parse(out)
    pid = os.getpid()
    comm = Path("/proc/self/comm").read_text().strip()
    assert (pid, pid, comm) in lines, out
    assert [(b"TSK1", tgid, tid, n) for n, (tgid, tid, _) in enumerate(lines)] == records
    assert trailer == TRAILER, trailer

    text = trace.edges()
    assert trace.hits, text
    assert {h.pid for h in trace.hits} == {pid}, text
    assert_called(trace, PROG, HELPERS)
    assert "(unseen caller)" not in text, text
