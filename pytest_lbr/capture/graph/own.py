"""Which function-tracer records are the tracer's own work, not the traced code's.

The function tracer's pid filter and our own BPF programs (the fexit hook that
reads a traced program's return value) run among the records of the threads a
trace follows; `TracerOwn` leaves them, and what they called, out of the hits
(`pytest_lbr.capture.graph.hits`). What the tracer does in the traced process
itself, which a user's program sees as that process's work, is `OWN_WORK_NOTE`'s.
"""

from __future__ import annotations

import re

from pytest_lbr.capture.graph.text import FunctionRecord
from pytest_lbr.noise import TRACER_PROGRAMS

__all__ = ["CAPTURE_MODULES", "CLOCK_READS", "FTRACE_OWN_PARENTS", "OWN_WORK_NOTE", "TracerOwn"]

#: The read function of each clocksource the kernel may pick (names in
#: /sys/devices/system/clocksource/*/current_clocksource): put in the instance's
#: set_ftrace_notrace before the tracer starts. Any other is learnt from the
#: first trace's records (`backend.GraphRecorder.skip_clock_reads`).
CLOCK_READS = {
    "hpet": "read_hpet",
    "acpi_pm": "acpi_pm_read",
    "tsc": "read_tsc",
    "tsc-early": "read_tsc",
    "kvm-clock": "kvm_clock_get_cycles",
    # arm64's generic timer (drivers/clocksource/arm_arch_timer.c): in the arm64
    # 6.1 guest its reads were most of a first trace's records.
    "arch_sys_counter": "arch_counter_read",
}

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
