"""The function tracer of a session: its private tracefs instance, set up once.

`GraphRecorder` makes the instance at the first trace and keeps the function
tracer on until `close()` (turning it on patches every traceable call site: most
of what a traced test used to cost); a trace sets the pid list and switches
recording on and off (`capture.graph.backend`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.kernel.functions import filter_functions_text
from pytest_lbr.kernel.tracefs import (
    TRACEFS_NOT_MOUNTED,
    Instance,
    TracefsError,
    cleanup_stale_instances,
    find_tracefs,
)
from pytest_lbr.noise import CLOCK_READS, TRACE_CLOCK

__all__ = ["BUFFER_KB", "GraphRecorder"]

CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")

#: Per-CPU ring buffer size: room for a BPF test run's records (thousands, of ~40 bytes).
BUFFER_KB = 16384


def _clock_reads() -> list[str]:
    """The current clocksource's read function, if `CLOCK_READS` knows it."""
    try:
        name = CLOCKSOURCE.read_text().strip()
    except OSError:
        return []
    return [CLOCK_READS[name]] if name in CLOCK_READS else []


class GraphRecorder:
    """The function tracer of one session: a private instance, set up once.

    Turning the function tracer on patches every traceable call site in the
    kernel (~45,000 on the Debian kernels), and off again the same: most of what
    a traced test used to cost. So the instance is
    created and the tracer turned on at the first trace, and both stay until
    `close()`; between traces the instance records on no CPU (`Instance.arm`)
    and its buffer is empty (each trace consumes what it read). A trace only sets
    the pid list, adds its events and probes, and switches recording on and off.

    Only this process's threads are ever recorded. `close()` (idempotent) undoes
    everything; a killed process's instance is removed by the next session
    (`cleanup_stale_instances`).
    """

    def __init__(self, functions: Sequence[str] = ()) -> None:
        #: The only functions recorded (set_ftrace_filter); empty: every function.
        self.functions = tuple(functions)
        self._instance: Instance | None = None
        self._pids: frozenset[int] = frozenset()
        self._children = False
        self._finalizer: weakref.finalize | None = None
        self._skipped: set[str] = set()

    @property
    def ready(self) -> bool:
        """Whether the instance is made (`instance()` makes no directory then)."""
        return self._instance is not None

    def instance(self, tids: Iterable[int], children: bool = False) -> Instance:
        """The session's instance, recording `tids` once armed (created on first use).

        With `children`, the kernel adds each process or thread they start to
        the pid list (function-fork), and its children, and so on.
        """
        wanted = frozenset(tids)
        inst = self._instance
        if inst is None:
            root = find_tracefs()
            if root is None:
                raise CaptureError(f"graph backend: {TRACEFS_NOT_MOUNTED}")
            cleanup_stale_instances(root)
            inst = Instance(root, BUFFER_KB)
            try:
                inst.write("trace_clock", "mono")
                # record-tgid: each line names its process, for hits of other processes.
                for opt in ("sym-offset", "sym-addr", "record-tgid"):
                    inst.write(f"options/{opt}", "1")
                # Our threads only, unless a trace asks for children (below).
                inst.write("options/function-fork", "0")
                # No set_event_pid: the few events we enable are cut by tid when
                # read, and a pid list hooks several scheduler tracepoints: more
                # live code patching (see tracefs._remove_instance).
                inst.set_pids(wanted)
                self._skipped.update(inst.skip_functions(_clock_reads()))
                if self.functions:
                    # Before the tracer starts: only these call sites are patched.
                    inst.set_function_filter(self.functions, filter_functions_text(root))
                inst.write("current_tracer", "function")
            except TracefsError as exc:
                inst.close()
                raise CaptureError(f"graph backend: {exc}") from None
            self._instance, self._pids = inst, wanted
            # Also at interpreter exit, and if the owner forgets to close.
            self._finalizer = weakref.finalize(self, inst.close)
        # After a trace with children the kernel's pid list may hold theirs.
        elif wanted != self._pids or children or self._children:
            try:
                inst.set_pids(wanted)
            except TracefsError as exc:
                raise CaptureError(f"graph backend: {exc}") from None
            self._pids = wanted
        if children != self._children:
            try:
                inst.write("options/function-fork", "1" if children else "0")
            except TracefsError as exc:
                raise CaptureError(f"graph backend: {exc}") from None
            self._children = children
        return inst

    def skip_clock_reads(self, records: Iterable[FunctionRecord | EventRecord]) -> None:
        """Stop recording the trace clock's reads seen in `records` (a clocksource
        `CLOCK_READS` does not know): one call site re-patched, once per session."""
        seen = {
            r.func for r in records if isinstance(r, FunctionRecord) and r.parent == TRACE_CLOCK
        } - self._skipped
        if seen and self._instance is not None:
            self._skipped.update(seen)
            self._instance.skip_functions(sorted(seen))

    def close(self) -> None:
        """Turn the tracer off and remove the instance (idempotent)."""
        self._instance = None
        if self._finalizer is not None:
            self._finalizer()
