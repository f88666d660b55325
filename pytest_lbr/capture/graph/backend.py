"""The graph backend: a software call trace where the CPU has no LBR.

The ftrace function tracer records every kernel function the test's threads
enter, in a private tracefs instance (`pytest_lbr.kernel.tracefs`). The records
(`pytest_lbr.capture.graph.text`) are nested into calls and returns
(`pytest_lbr.capture.graph.calls`), then cut per target, as its kind's module of
`pytest_lbr.capture.kinds` arms the instance for it and cuts its hits:

* ``kfunc:NAME``/``GLOB``: one hit per outermost invocation, with everything
  under it; a single function also gets its return value from a kretprobe
  event in the same instance;
* a BPF program: one hit per run. The JIT image has no ftrace entry, so a
  run shows as the calls whose parent (call site) is inside the program or
  one of its subprograms (their kallsyms names, or the JITed address ranges),
  everything nested under those calls, and their returns; a call made by the
  program returns from the program's previous call first. Nothing of the
  BPF_PROG_TEST_RUN machinery is included: a record whose parent is the
  machinery again (e.g. bpf_test_run between two runs of a repeat) ends the
  run. The return value comes from the LBR tracer's fexit hook on the program
  (no branch snapshot): its record closes the run (a run that called nothing
  is a hit with no branches, as on the LBR backend). Where fexit cannot attach
  (no BTF, no BPF trampolines), the runs have no `retval` and a note says so;
* ``tp:CAT/NAME``: one hit per event, with the thread's calls since its
  previous hit (or arming).

* ``uprobe:PATH:SYMBOL`` / ``uretprobe:PATH:SYMBOL``: one hit per entry (or
  return) of the user function, in any process running the binary, from uprobe
  events in the same instance. An entry hit holds the user-level call edge
  (caller -> function, the caller read from the return address: on the stack on
  x86-64, in the link register on arm64);
  a return hit holds the return edge and `retval`. The function tracer follows
  only the test's own threads, so the kernel calls a traced child process makes
  are not in these hits.

This module does the I/O: the session's instance (`GraphRecorder`), arming and
reading it (`GraphCapture`). Cutting records into hits is pure and lives in
`pytest_lbr.capture.graph.hits` (and, per kind, `pytest_lbr.capture.kinds`); a live capture's bookkeeping between polls in
`pytest_lbr.capture.graph.live_state`.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from pytest_lbr.capture.base import (
    LIVE_OWN_PROCESS,
    BackendDriver,
    Capabilities,
    Capability,
    Capture,
    CaptureError,
    Scope,
)
from pytest_lbr.capture.call_sites import call_sites
from pytest_lbr.capture.graph.hits import HitBuilder, descendants, ran_in_interrupt
from pytest_lbr.capture.graph.live_state import (
    LIVE_BUFFER_KB,
    LIVE_FINAL_S,
    LIVE_MAX_PENDING,
    LIVE_READ_LIMIT,
    LiveState,
    settle,
)
from pytest_lbr.capture.graph.own import CAPTURE_MODULES, OWN_WORK_NOTE
from pytest_lbr.capture.graph.probe import GRAPH_CAPABILITIES, probe_graph
from pytest_lbr.capture.graph.recorder import BUFFER_KB, GraphRecorder
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord, parse_trace
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.implied import ProgramFlow, finish_runs
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.capture.kinds.protocol import GraphArming
from pytest_lbr.kernel.machine import machine
from pytest_lbr.kernel.tasks import live_tgid
from pytest_lbr.kernel.tracefs import (
    Instance,
    TracefsError,
)
from pytest_lbr.model import Hit, Trace
from pytest_lbr.targets import Target

if TYPE_CHECKING:
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.capture.hooks.program_exits import ProgramExits
    from pytest_lbr.symbols.elf import ElfFunctions

__all__ = ["GRAPH_CAPABILITIES", "GraphBackend", "GraphCapture", "GraphRecorder", "probe_graph"]

#: Narrowed recorders a session keeps (`GraphBackend`): one per traced program set.
NARROWED_KEPT = 4


#: The event that names each new process or thread and its parent.
FORK_EVENT = "sched/sched_process_fork"


def _clock_ns() -> int:
    # trace_clock "mono" is ktime_get_mono_fast_ns: CLOCK_MONOTONIC.
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class GraphBackend:
    """The graph backend for the registry (`pytest_lbr.capture.base.BackendDriver`):
    one session's function tracer (`GraphRecorder`), set up at the first capture and
    kept until `close()`."""

    name: ClassVar[str] = "graph"
    capabilities: ClassVar[Capabilities] = GRAPH_CAPABILITIES

    def __init__(self) -> None:
        self._recorder: GraphRecorder | None = None
        #: Narrowed system-wide traces' recorders by function set, newest last.
        self._narrowed: dict[tuple[str, ...], GraphRecorder] = {}

    @classmethod
    def probe(cls) -> Capability:
        """Whether the function tracer runs here (`probe_graph`)."""
        return probe_graph()

    def prepare(self) -> None:
        """The session's instance made (mkdir; stale ones removed), the function tracer
        on, `CAPTURE_MODULES` imported: before the traced code (idempotent)."""
        for module in CAPTURE_MODULES:
            importlib.import_module(module)
        self._recorder = self._recorder or GraphRecorder()
        self._recorder.instance(Scope().tids())

    def open(
        self,
        targets: Sequence[Target],
        *,
        scope: Scope,
        filter: str | None = None,
        live: bool = False,
    ) -> GraphCapture:
        """A not-yet-armed capture sharing the session's function tracer (`filter`,
        an LBR branch filter, does not apply: the function tracer records calls)."""
        self._recorder = self._recorder or GraphRecorder()
        capture = GraphCapture(list(targets), self._recorder, scope=scope)
        capture.narrowed = self._narrowed_recorder
        if live:
            capture.live()
        return capture

    def _narrowed_recorder(self, functions: tuple[str, ...]) -> GraphRecorder:
        """The session's recorder of exactly `functions`, set up on first use and
        kept, like the session's own: creating one patches its functions, and a
        suite traces the same program test after test."""
        recorder = self._narrowed.pop(functions, None) or GraphRecorder(functions)
        self._narrowed[functions] = recorder
        while len(self._narrowed) > NARROWED_KEPT:
            self._narrowed.pop(next(iter(self._narrowed))).close()
        return recorder

    def close(self) -> None:
        """Release the session's kept fexit hooks and turn its function tracers off
        (idempotent)."""
        from pytest_lbr.capture.hooks.program_exits import release_session_exits

        recorder, self._recorder = self._recorder, None
        narrowed, self._narrowed = list(self._narrowed.values()), {}
        for r in [recorder, *narrowed]:
            if r is not None:
                try:
                    release_session_exits(r)  # a narrowed trace's hooks are kept by its recorder
                finally:
                    r.close()


class GraphCapture:
    """A function-tracer capture of `targets` for the threads `scope` names
    (this process's by default).

    With a `recorder` (a session's), the function tracer stays on after the
    trace; without one, the capture sets up its own and removes it at `close()`.
    """

    def __init__(
        self,
        targets: list[Target],
        recorder: GraphRecorder | None = None,
        scope: Scope | None = None,
    ) -> None:
        self.targets = targets
        #: Whose work: "children" and cgroups also record the processes the
        #: threads start (function-fork), known from the sched_process_fork
        #: events of the trace; "system" records every task (no pid list).
        self.scope = scope or Scope()
        self._own = recorder is None
        self._recorder = recorder or GraphRecorder()
        self._instance: Instance | None = None
        self._matchers: list[Callable[[str, int], bool]] = []
        self._returns: dict[str, str] = {}  # kretprobe event name -> function
        self._events: dict[int, str] = {}  # target index -> event name
        self._window = (0, 0)
        self._tids: set[int] = set()
        self._notes: list[str] = []
        self._user: dict[int, ElfFunctions] = {}  # target index -> its binary's symbols
        #: program target index -> its JITed functions (kallsyms name or None, start)
        self._starts: dict[int, list[tuple[str | None, int]]] = {}
        self._flows: dict[str, ProgramFlow | None] = {}  # program target -> its calls' flow
        self._exits: HookSet | ProgramExits | None = None  # fexit on program targets, for retval
        self._exit_targets: list[int] = []  # the hook set's target i -> our target index
        self._live: LiveState | None = None  # set by live(): read with poll() while armed
        #: Where a narrowed system-wide trace gets its recorder (a session keeps
        #: them: `GraphBackend`); None: one of its own, removed at `close()`.
        self.narrowed: Callable[[tuple[str, ...]], GraphRecorder] | None = None
        self.text = ""

    def live(self) -> None:
        """Make this a live capture, read with `poll()` while it runs (call before `start()`).

        This process's threads are never recorded: a live reader that traced
        itself would record its own reading of the trace. What it starts is, as
        on the LBR path (`pytest_lbr.live`: one rule for both backends). So the
        scope must name other tasks: a pid, a cgroup or "system".
        """
        if self._instance is not None:
            raise CaptureError("graph capture: live() comes before start()")
        if self.scope.is_this_process:
            raise CaptureError(LIVE_OWN_PROCESS)
        self._live = LiveState()

    def start(self) -> None:
        """Add the targets' events to the session's instance, then arm it last."""
        self._tids = self.scope.tids()
        if self.scope.kind == "system":
            self._narrow()
        children = self.scope.kind == "children" or self.scope.cgroup is not None
        # Live: no function-fork for the untraced threads, so what this process
        # starts while armed is recorded like any other task.
        if not self._recorder.ready and self._live is None:  # not made by prepare()
            self._notes.append(OWN_WORK_NOTE)
        self._instance = inst = self._recorder.instance(self._tids, children)
        try:
            if children:
                inst.enable_event(FORK_EVENT)
            if self._live is not None:
                self._live.own = Scope().tids()  # this process's threads
                inst.set_notrace_pids(self._live.own)
                # A reader behind the kernel reads the oldest records first: a
                # smaller buffer keeps it nearer the present (and loses, counted).
                inst.write("buffer_size_kb", str(LIVE_BUFFER_KB))
            self._configure(inst)
            # No inst.clear(): arming starts from an empty buffer (see Instance.arm),
            # and each clear waits for an RCU grace period.
        except TracefsError as exc:
            raise CaptureError(f"graph backend: {exc}") from None
        inst.arm()
        self._window = (_clock_ns(), 0)

    def stop(self) -> Trace:
        """Disarm first, then read and cut the records into hits (a live capture:
        the hits `poll()` has not returned yet)."""
        t_disarm = _clock_ns()
        inst = self._instance
        if inst is None:
            raise CaptureError("graph capture stopped before it was started")
        if self._live is not None:
            return self._stop_live(self._live, inst)
        inst.disarm()
        self._window = (self._window[0], t_disarm)
        exits: dict[int, list[RawHit]] = {i: [] for i in self._exit_targets}
        if self._exits is not None:
            for raw in self._exits.drain():
                if self._window[0] < raw.ts_ns < self._window[1]:
                    exits[self._exit_targets[raw.target]].append(raw)
        #: The instance's trace text as read (kept for debugging and test data). Read
        #: from trace_pipe, which consumes it: the next arm needs no clear (`Instance.arm`).
        try:
            self.text = inst.read_pipe(None)
        except TracefsError as exc:
            raise CaptureError(f"graph backend: {exc}") from None
        records = parse_trace(self.text)
        self._recorder.skip_clock_reads(records)
        if self.scope.kind == "children" or self.scope.cgroup is not None:
            self._tids |= descendants(self._tids, records)
        if self.scope.cgroup is not None:
            self._tids |= self.scope.tids()  # moved in while the trace was armed
        trace = _trace()
        trace.capture_text = self.text
        trace.lost = inst.lost()
        trace.notes = list(self._notes)
        if trace.lost:
            trace.notes.append(f"ftrace ring buffer overran: {trace.lost} records lost")
        everyone = self.scope.kind == "system"
        interrupts = self.scope.interrupts
        wanted = self._keeps(self._window[1])
        kept = [r for r in records if wanted(r)]
        if not everyone:
            # fexit hooks see every process where the scope is not this process.
            contexts: dict[tuple[int, bool], list[FunctionRecord | EventRecord]] = {}
            for r in kept if interrupts else ():  # only asked about with interrupts
                contexts.setdefault((r.tid, isinstance(r, FunctionRecord) and r.in_irq), []).append(
                    r
                )
            for raws in exits.values():
                raws[:] = [
                    raw
                    for raw in raws
                    if raw.tid in self._tids or (interrupts and ran_in_interrupt(contexts, raw))
                ]
        if self._exits is not None and self._exits.lost:
            trace.notes.append(f"fexit ring buffer overran: {self._exits.lost} returns lost")
        with call_sites.one_reading():  # the programs' code, read once for this trace
            trace.hits = self._builder().build(kept, exits)
        trace.notes.extend(finish_runs(trace.hits, self._flows))
        return trace

    def close(self) -> None:
        """Disarm and remove this trace's events and probes (idempotent); a capture
        without a session's recorder also removes the instance."""
        inst, self._instance = self._instance, None
        exits, self._exits = self._exits, None
        try:
            if exits is not None:
                exits.close()
            if inst is not None:
                inst.disarm()
                if self._live is not None:
                    _end_live(inst)
                inst.release()
        finally:
            if self._own:
                self._recorder.close()

    def trim(self, hits: list[Hit]) -> None:
        """Nothing to trim: the function tracer does not record its own calls."""

    # -- live ---------------------------------------------------------------------

    def poll(self) -> list[Hit]:
        """The hits completed since the last poll, oldest first (a `live()` capture, armed).

        Reads what the instance's trace_pipe holds (consuming it) and the
        programs' fexit records, and keeps each context's records (a thread, or
        the interrupts on it) until the hits they make are complete:

        * ``kfunc:NAME``: at its return event; a glob (no return event): when the
          thread's next hit of it starts, or the thread has been quiet for
          `LIVE_QUIET_S`;
        * a BPF program: at its fexit record (where fexit cannot attach: as a glob);
        * ``tp:``, ``uprobe:``, ``uretprobe:``: at the event; its calls are the
          thread's since its previous hit, `LIVE_HOLD_NS` back at most.

        The records of the hits it returns are dropped, so each hit comes once.
        A context holding more than `LIVE_MAX_PENDING` records hands its hits over
        as they stand (`notes` counts it). `stop()` returns the rest.
        """
        live, inst = self._live, self._instance
        if live is None or inst is None:
            raise CaptureError("graph capture: poll() needs live() and start()")
        self._take_live(live, inst)
        return settle(live, self._builder(), False, time.monotonic(), _clock_ns())

    @property
    def lost(self) -> int:
        """Records lost so far: ftrace ring buffer overruns, and the fexit returns
        the hook's ring buffer dropped."""
        n = self._instance.lost() if self._instance is not None else 0
        n += self._live.unread if self._live is not None else 0
        return n + (self._exits.lost if self._exits is not None else 0)

    @property
    def notes(self) -> list[str]:
        """Why the hits so far may be incomplete (e.g. no return values: fexit)."""
        notes = list(self._notes)
        if self._live is not None and self._live.cut_short:
            notes.append(
                f"{self._live.cut_short} time(s) a thread held over {LIVE_MAX_PENDING} records "
                "for an unfinished hit: its hits were handed over as they stood"
            )
        return notes

    def _stop_live(self, live: LiveState, inst: Instance) -> Trace:
        """Disarm, read what is left (for `LIVE_FINAL_S` at most: the records still
        unread then count as lost) and hand over every hit not yet returned."""
        inst.disarm()
        until = time.monotonic() + LIVE_FINAL_S
        while time.monotonic() < until and self._take_live(live, inst):
            pass
        live.unread = inst.unread()
        trace = _trace()
        trace.hits = settle(live, self._builder(), True, time.monotonic(), _clock_ns())
        trace.lost = self.lost
        trace.notes = self.notes
        if trace.lost:
            trace.notes.append(f"ring buffers overran: {trace.lost} records lost")
        if live.unread:
            trace.notes.append(f"{live.unread} records still unread at stop (counted as lost)")
        _end_live(inst)
        return trace

    def _take_live(self, live: LiveState, inst: Instance) -> bool:
        """Add what arrived to the contexts' records; whether anything did."""
        # fexit records first: a run's function records are in the pipe before its return.
        raws = self._exits.drain() if self._exits is not None else []
        try:
            text = inst.read_pipe(LIVE_READ_LIMIT)
        except TracefsError as exc:
            raise CaptureError(f"graph backend: {exc}") from None
        if not text and not raws:
            return False
        text = live.partial + text
        end = text.rfind("\n") + 1
        text, live.partial = text[:end], text[end:]
        records = parse_trace(text)
        self._recorder.skip_clock_reads(records)
        if self.scope.kind == "children" or self.scope.cgroup is not None:
            self._tids |= descendants(self._tids, records)
        if self.scope.cgroup is not None:
            self._tids |= self.scope.tids()  # moved in since
        wanted = self._keeps(None)
        mine, now = os.getpid(), time.monotonic()
        own = live.own
        # Events are not filtered by set_ftrace_notrace_pid: ours go here.
        live.add((r for r in records if r.tgid != mine and r.tid not in own and wanted(r)), now)
        for raw in raws:
            if raw.pid == mine or raw.ts_ns <= self._window[0]:
                continue
            irq = self.scope.interrupts and ran_in_interrupt(live.records, raw)
            if self.scope.kind == "system" or raw.tid in self._tids or irq:
                live.add_exit((raw.tid, irq), self._exit_targets[raw.target], raw, now)
        return True

    def _builder(self) -> HitBuilder:
        """What cuts this capture's records into hits, as `_configure` set it up."""
        return HitBuilder(
            self.targets,
            self._matchers,
            self._events,
            self._returns,
            self._user,
            self._exit_targets,
            interrupts=self.scope.interrupts,
            starts=self._starts,
            site_of=call_sites,
            tgid_of=live_tgid,
        )

    def _keeps(self, end: int | None) -> Callable[[FunctionRecord | EventRecord], bool]:
        """Whether a record is the scope's work while armed (and before `end`)."""
        # uprobes fire in whichever process runs the binary, not only ours.
        user_events = {self._events[i] for i in self._user}
        everyone = self.scope.kind == "system"
        interrupts = self.scope.interrupts
        begin = self._window[0]

        def wanted(r: FunctionRecord | EventRecord) -> bool:
            if r.ts_ns <= begin or (end is not None and r.ts_ns >= end):
                return False
            if everyone or r.tid in self._tids:
                return True
            if isinstance(r, EventRecord):
                return r.name in user_events
            return interrupts and r.in_irq

        return wanted

    # -- internals ----------------------------------------------------------------

    def _narrow(self) -> None:
        """A system-wide trace of programs and kernel functions records only their
        call graph (`pytest_lbr.capture.graph.narrow`), in an instance of its own."""
        if not self.targets or not all(kind_of(t).narrows for t in self.targets):
            return
        # Imported here: it loads capstone (a slow import at a session's start),
        # which only system-wide traces need.
        from pytest_lbr.capture.graph.narrow import narrowing

        try:
            found = narrowing(self.targets)
        except (OSError, CaptureError) as exc:
            self._notes.append(
                f'scope="system": recorded every function of the machine: cannot read '
                f"the targets' call graph ({exc})"
            )
            return
        if not found.functions:
            return
        if self._own:
            self._recorder.close()
        if self.narrowed is not None:
            self._recorder, self._own = self.narrowed(found.functions), False
        else:
            self._recorder, self._own = GraphRecorder(found.functions), True
        self._notes.append(found.note(", ".join(t.spec for t in self.targets)))

    def _configure(self, inst: Instance) -> None:
        """Arm the instance for every target, each as its kind says (`capture.kinds`)."""
        arming = GraphArming(
            inst,
            self._matchers,
            self._events,
            self._returns,
            self._user,
            self._starts,
            self._flows,
        )
        for i, t in enumerate(self.targets):
            kind_of(t).arm_graph(arming, i, t)
        self._attach_exits(arming.programs)

    def _attach_exits(self, programs: list[int]) -> None:
        """The LBR tracer's fexit hook on each program target, without snapshots:
        the function tracer cannot see a JITed program return, fexit can."""
        if not programs:
            return
        from pytest_lbr.capture.hooks.hook_set import HookSet
        from pytest_lbr.capture.hooks.program_exits import session_exits

        # Every process's runs where the scope is not this process; stop() keeps the scope's.
        tgid = os.getpid() if self.scope == Scope() else 0
        targets = [self.targets[i] for i in programs]
        hooks: HookSet | ProgramExits
        try:
            if self._own:  # no session: this trace's own hooks
                hooks = HookSet(targets, snapshot=False, tgid=tgid)
                hooks.attach()
            else:  # kept by the session, armed for this trace (close() disarms them)
                hooks = session_exits(self._recorder).take(targets, tgid)
        except (CaptureError, OSError) as exc:
            # The hook set's message is written for the lbr backend ("... use
            # --lbr-backend=graph"): keep only what the kernel refused.
            why = str(exc).split(": the lbr backend", 1)[0].split("; ", 1)[0]
            for i in programs:
                spec = self.targets[i].spec
                why = why.removeprefix(f"{spec}: ")
                self._notes.append(f"{spec}: no return values: fexit cannot attach ({why})")
            return
        self._exits, self._exit_targets = hooks, programs


def _trace() -> Trace:
    """An empty graph-backend trace of this machine."""
    here = machine()
    return Trace(backend="graph", kernel_release=here.release, arch=here.name)


def _end_live(inst: Instance) -> None:
    """Undo what a live capture set on the (session's) instance."""
    try:
        inst.set_notrace_pids(())
        inst.write("buffer_size_kb", str(BUFFER_KB))
    except TracefsError:
        pass  # the instance is going away


if TYPE_CHECKING:  # mypy checks the backend keeps to the protocols
    _driver: type[BackendDriver] = GraphBackend
    _capture: type[Capture] = GraphCapture
