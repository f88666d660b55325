"""Which function-tracer records are the tracer's own work, not the traced code's.

The function tracer's pid filter and our own BPF programs (the fexit hook that
reads a traced program's return value) run among the records of the threads a
trace follows; `TracerOwn` leaves them, and what they called, out of the hits
(`pytest_lbr.capture.graph.hits`). What the tracer does in the traced process
itself, which a user's program sees as that process's work, is `OWN_WORK_NOTE`'s.
"""

from __future__ import annotations

import functools
import re

from pytest_lbr.capture.graph.text import FunctionRecord
from pytest_lbr.noise import FTRACE_OWN_PARENTS, TRACER_PROGRAMS

__all__ = ["CAPTURE_MODULES", "OWN_WORK_NOTE", "TracerOwn"]

#: What a graph capture imports where it needs it, imported by
#: `backend.GraphBackend.prepare` (see `OWN_WORK_NOTE`); `narrow` brings capstone
#: and the symbol modules.
CAPTURE_MODULES = tuple(
    f"pytest_lbr.{m}"
    for m in "capture.graph.narrow capture.hooks.hook_set capture.hooks.program_exits "
    "capture.implied kernel.helpers programs.find programs.lines bytecode.flow "
    "bytecode.instructions symbols.elf".split()
)

#: A trace's note when arming it made a tracefs instance in the traced process: the
#: session's, where `Tracer.prepare()` (the pytest plugin's `lbr` fixture calls it, before
#: the test body) did not make it first, or a system-wide trace's narrowed instance,
#: made at the first trace of its function set (the oldest of those kept is removed
#: then). An import in that process does the same (pytest's assertion rewriting calls
#: mkdir(2) for each plugin module it loads): `prepare()` imports what a trace needs.
OWN_WORK_NOTE = (
    "the graph backend made a tracefs instance (mkdir; rmdir of an old one) in this "
    "process as the trace was set up: a program counting this process's mkdir/rmdir "
    "calls counted it too (Tracer.prepare() before the traced code makes the session's)"
)

#: Our own BPF programs (bpf/lbr_tracer.bpf.c: the fexit that reads a traced
#: program's return value runs in its trampoline, right after it): their calls
#: ("bpf_get_current_pid_tgid <-bpf_prog_<tag>_lbr_fexit", 6.12 guest) are the
#: tracer's work, recorded when a traced program calls the same helper.
_TRACER_PROGRAM = re.compile(rf"^bpf_prog_[0-9a-f]{{16}}_(?:{'|'.join(TRACER_PROGRAMS)})$")


@functools.lru_cache(maxsize=4096)
def _tracer_parent(parent: str) -> bool:
    """Whether a record with this parent is the tracer's own work (asked per record)."""
    return parent in FTRACE_OWN_PARENTS or _TRACER_PROGRAM.match(parent) is not None


class TracerOwn:
    """Which records are the tracer's own work (ftrace's, `FTRACE_OWN_PARENTS`; our
    programs', `_TRACER_PROGRAM`) or nested in it.

    Records come depth first per thread: a record whose parent is not one dropped
    since the last kept record of its context ends the dropped subtree.
    """

    def __init__(self) -> None:
        self._open: dict[tuple[int, bool], set[str]] = {}

    def dropped(self, r: FunctionRecord) -> bool:
        """Whether `r` is the tracer's own work (remembered: its callees are too)."""
        key = (r.tid, r.in_irq)
        inside = self._open.get(key)
        own = r.parent is not None and _tracer_parent(r.parent)
        if own or (inside and r.parent in inside):
            self._open.setdefault(key, set()).add(r.func)
            return True
        if inside:
            del self._open[key]
        return False
