"""Which function-tracer records are the tracer's own work, not the traced code's.

The function tracer's pid filter and our own BPF programs (the fexit hook that
reads a traced program's return value) run among the records of the threads a
trace follows; `TracerOwn` leaves them, and what they called, out of the hits
(`pytest_lbr.capture.graph.hits`).
"""

from __future__ import annotations

import re

from pytest_lbr.capture.graph.text import FunctionRecord
from pytest_lbr.noise import TRACER_PROGRAMS

__all__ = ["FTRACE_OWN_PARENTS", "TracerOwn"]

#: The function tracer's own pid filter (kernel/trace/pid_list.c, since v5.17), which
#: the sched_switch tracepoint runs through an indirect call when a traced thread
#: is switched out, because the backend sets set_ftrace_pid. kernel/trace is built
#: without -pg, so only its callees are recorded ("_raw_spin_lock_irqsave
#: <-trace_pid_list_is_set", 6.1 and 6.12 guests): ftrace's work, as clock reads are.
FTRACE_OWN_PARENTS = frozenset({"trace_pid_list_is_set"})
#: Our own BPF programs (bpf/lbr_tracer.bpf.c: the fexit that reads a traced
#: program's return value runs in its trampoline, right after it): their calls
#: ("bpf_get_current_pid_tgid <-bpf_prog_<tag>_lbr_fexit", 6.12 guest) are the
#: tracer's work, recorded when a traced program calls the same helper.
_TRACER_PROGRAM = re.compile(rf"^bpf_prog_[0-9a-f]{{16}}_(?:{'|'.join(TRACER_PROGRAMS)})$")


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
        own = r.parent in FTRACE_OWN_PARENTS or bool(r.parent and _TRACER_PROGRAM.match(r.parent))
        if own or (inside and r.parent in inside):
            self._open.setdefault(key, set()).add(r.func)
            return True
        if inside:
            del self._open[key]
        return False
