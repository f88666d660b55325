"""The graph backend: a software call trace where the CPU has no LBR.

The ftrace function tracer records every kernel function the test's threads
enter, in a private tracefs instance (`pytest_lbr.kernel.tracefs`). The records
(`pytest_lbr.capture.graph_text`) are nested into calls and returns
(`pytest_lbr.capture.graph_calls`), then cut per target:

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
"""

from __future__ import annotations

import bisect
import errno
import fnmatch
import os
import re
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pytest_lbr.capture.base import (
    BackendDriver,
    Capabilities,
    Capability,
    Capture,
    CaptureError,
    Scope,
)
from pytest_lbr.capture.graph_calls import (
    Frame,
    Mentions,
    Step,
    innermost,
    innermost_call,
    reconstruct,
)
from pytest_lbr.capture.graph_text import EventRecord, FunctionRecord, parse_trace
from pytest_lbr.capture.records import RawHit
from pytest_lbr.kernel.functions import filter_functions_text, matching_functions
from pytest_lbr.kernel.tracefs import (
    TRACEFS_NOT_MOUNTED,
    Instance,
    TracefsError,
    cleanup_stale_instances,
    find_tracefs,
)
from pytest_lbr.model import UNSEEN_CALLER, Branch, Hit, Location, Trace
from pytest_lbr.noise import EXIT_HOOK_FRAMES, PROBE_HANDLERS
from pytest_lbr.symbols.elf import ElfError, ElfFunctions
from pytest_lbr.targets import Target

if TYPE_CHECKING:
    from pytest_lbr.capture.hooks import HookSet

__all__ = [
    "GRAPH_CAPABILITIES",
    "GraphBackend",
    "GraphCapture",
    "GraphRecorder",
    "build_hits",
    "probe_graph",
]

#: What trace_clock "mono" reads: its clocksource's read function, when traceable
#: (read_hpet under TCG), is recorded with every record, nested anywhere; such
#: records are ftrace's own. In a 6.1 guest they were 2,058 of a trace's 3,091.
TRACE_CLOCK = "ktime_get_mono_fast_ns"

#: The read function of each clocksource the kernel may pick (names in
#: /sys/devices/system/clocksource/*/current_clocksource): put in the instance's
#: set_ftrace_notrace before the tracer starts. Any other is learnt from the
#: first trace's records (`GraphRecorder.skip_clock_reads`).
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
CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")

#: Interrupt entry and exit code that runs before the hardirq bit is set in
#: preempt_count or after it is cleared: ftrace does not flag these records as
#: irq, yet they are not the thread's work. Seen in the 6.1 and 6.12 guests:
#: "irq_enter_rcu <-sysvec_apic_timer_interrupt", "handle_softirqs <-__irq_exit_rcu",
#: "idle_cpu <-__irq_exit_rcu", "exit_to_user_mode_prepare <-irqentry_exit_to_user_mode".
#: Kept, they nested into whatever the thread was doing: a timer interrupt in the
#: middle of a BPF program run cut it into two hits, the second taking in the
#: BPF_PROG_TEST_RUN machinery (6.1), or hid one of the program's calls under the
#: interrupt in the golden trace (6.12). The softirq entry a thread takes itself
#: (local_bh_enable -> do_softirq) is the same: arm64 runs it on the irq stack,
#: "____do_softirq <-call_on_irq_stack" (arch/arm64/kernel/irq.c; arm64 6.1 guest),
#: and a softirq pending in a traced connect put that edge in a golden trace.
_IRQ_EDGE_PARENT = re.compile(
    r"^(?:asm_|sysvec_|__sysvec_|common_interrupt$|__common_interrupt$|spurious_interrupt"
    r"|irqentry_|__irq_exit_rcu$|irq_exit_rcu$|irq_enter_rcu$|call_on_irq_stack$)"
)
_IRQ_EDGE_FUNC = frozenset(
    {
        "irq_enter_rcu",
        "irq_exit_rcu",
        "__irq_exit_rcu",
        "handle_softirqs",
        "do_softirq",
        "do_softirq_own_stack",
        "____do_softirq",
        "__do_softirq",
    }
)


def _interrupt_edge(r: FunctionRecord) -> bool:
    """A record of interrupt entry/exit code that ftrace's flags do not mark as irq."""
    return r.func in _IRQ_EDGE_FUNC or bool(r.parent and _IRQ_EDGE_PARENT.match(r.parent))


#: Per-CPU ring buffer size: a BPF test run under TCG is ~5,000 records of ~40 bytes.
BUFFER_KB = 16384


def probe_graph() -> Capability:
    """Whether the function tracer can run in a private instance here, and if not why."""
    if os.geteuid() != 0:
        return Capability("graph", False, "the graph backend needs root (ftrace); run as root")
    root = find_tracefs()
    if root is None:
        return Capability("graph", False, TRACEFS_NOT_MOUNTED)
    if not (root / "instances").is_dir():
        return Capability("graph", False, f"tracefs at {root} has no instances/ (kernel too old)")
    try:
        cleanup_stale_instances(root)
        inst = Instance(root, buffer_kb=4)
    except OSError as exc:
        return Capability("graph", False, f"cannot create a tracefs instance: {exc}")
    try:
        tracers = inst.read("available_tracers").split()
        if "function" not in tracers:
            return Capability(
                "graph", False, f"the ftrace function tracer is not available (tracers: {tracers})"
            )
        # One function is enough to learn whether the tracer is allowed; all of
        # them would patch every call site in the kernel twice for nothing.
        inst.write("set_ftrace_filter", _probe_function(root))
        inst.write("current_tracer", "function")
    except OSError as exc:
        return Capability("graph", False, f"the ftrace function tracer is refused: {exc}")
    finally:
        inst.close()
    return Capability("graph", True)


#: The event that names each new process or thread and its parent.
FORK_EVENT = "sched/sched_process_fork"


def descendants(tids: Iterable[int], records: Iterable[FunctionRecord | EventRecord]) -> set[int]:
    """Every thread started by one of `tids` or by a thread so started, in time order.

    Body: "comm=python pid=281 child_comm=python child_pid=300" (pid and
    child_pid are thread ids).
    """
    family = set(tids)
    found: set[int] = set()
    for r in records:
        if not isinstance(r, EventRecord) or r.name != "sched_process_fork":
            continue
        fields = dict(part.split("=", 1) for part in r.body.split() if "=" in part)
        try:
            parent, child = int(fields["pid"]), int(fields["child_pid"])
        except (KeyError, ValueError):
            continue
        if parent in family:
            family.add(child)
            found.add(child)
    return found


def _probe_function(root: Path) -> str:
    with open(root / "available_filter_functions") as f:
        first = f.readline().split()
    if not first:
        raise TracefsError(errno.ENOENT, "available_filter_functions is empty")
    return first[0]


def _clock_reads() -> list[str]:
    """The current clocksource's read function, if `CLOCK_READS` knows it."""
    try:
        name = CLOCKSOURCE.read_text().strip()
    except OSError:
        return []
    return [CLOCK_READS[name]] if name in CLOCK_READS else []


def _clock_ns() -> int:
    # trace_clock "mono" is ktime_get_mono_fast_ns: CLOCK_MONOTONIC.
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class GraphRecorder:
    """The function tracer of one session: a private instance, set up once.

    Turning the function tracer on patches every traceable call site in the
    kernel (~45,000 on the Debian kernels), and off again the same: seconds
    under TCG, and most of what a traced test used to cost. So the instance is
    created and the tracer turned on at the first trace, and both stay until
    `close()`; between traces the ring buffer is off (`tracing_on=0`) and
    records nothing. A trace only sets the pid list, clears the buffer, adds its
    events and probes, and switches recording on and off.

    Only this process's threads are ever recorded. `close()` (idempotent) undoes
    everything; a killed process's instance is removed by the next session
    (`cleanup_stale_instances`).
    """

    def __init__(self) -> None:
        self._instance: Instance | None = None
        self._pids: frozenset[int] = frozenset()
        self._children = False
        self._finalizer: weakref.finalize | None = None
        self._skipped: set[str] = set()

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


#: What the graph backend can do: every scope, streaming (`GraphCapture.poll()`),
#: return values of single kernel functions (kretprobe), programs (fexit) and
#: uretprobes (not of kfunc globs: a return event per function would cost a kprobe
#: each), interrupt context; calls as branches, and no LBR branch filters.
GRAPH_CAPABILITIES = Capabilities(
    scopes=frozenset({"process", "children", "system", "pid", "cgroup"}),
    live=True,
    retval=frozenset({"kfunc", "prog", "uretprobe"}),
    in_interrupt=True,
    branches=True,
    filters=False,
)


class GraphBackend:
    """The graph backend for the registry (`pytest_lbr.capture.base.BackendDriver`):
    one session's function tracer (`GraphRecorder`), set up at the first capture and
    kept until `close()`."""

    name: ClassVar[str] = "graph"
    capabilities: ClassVar[Capabilities] = GRAPH_CAPABILITIES

    def __init__(self) -> None:
        self._recorder: GraphRecorder | None = None

    @classmethod
    def probe(cls) -> Capability:
        """Whether the function tracer runs here (`probe_graph`)."""
        return probe_graph()

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
        if self._recorder is None:
            self._recorder = GraphRecorder()
        capture = GraphCapture(list(targets), self._recorder, scope=scope)
        if live:
            capture.live()
        return capture

    def close(self) -> None:
        """Turn the session's function tracer off (idempotent)."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.close()


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
        self._exits: HookSet | None = None  # fexit on program targets, for retval
        self._exit_targets: list[int] = []  # the hook set's target i -> our target index
        self._live: _Live | None = None  # set by live(): read with poll() while armed
        self.text = ""

    def live(self) -> None:
        """Make this a live capture, read with `poll()` while it runs (call before `start()`).

        This process is never recorded (nor, with scope "system", what it starts):
        a live reader that traced itself would record its own reading of the
        trace. So the scope must name other tasks: a pid, a cgroup or "system".
        """
        if self._instance is not None:
            raise CaptureError("graph capture: live() comes before start()")
        scope = self.scope
        if scope.kind != "system" and scope.cgroup is None and scope.pid in (None, os.getpid()):
            raise CaptureError(
                "a live trace cannot record its own process (it would record its own "
                "reading of the trace): trace another pid, a cgroup or the system"
            )
        self._live = _Live()

    def start(self) -> None:
        """Add the targets' events to the session's instance, then arm it last."""
        self._tids = self.scope.tids()
        children = self.scope.kind == "children" or self.scope.cgroup is not None
        # Live, every task: function-fork makes what this process starts (a
        # symbolizer) as untraced as itself (no pid list to add it to here).
        follow = self._live is not None and self.scope.kind == "system"
        self._instance = inst = self._recorder.instance(self._tids, children or follow)
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
            inst.clear()
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
        #: The instance's trace text as read (kept for debugging and test data).
        self.text = inst.read("trace")
        records = parse_trace(self.text)
        self._recorder.skip_clock_reads(records)
        if self.scope.kind == "children" or self.scope.cgroup is not None:
            self._tids |= descendants(self._tids, records)
        if self.scope.cgroup is not None:
            self._tids |= self.scope.tids()  # moved in while the trace was armed
        trace = Trace(backend="graph", kernel_release=os.uname().release, arch=os.uname().machine)
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
                    if raw.tid in self._tids or (interrupts and _ran_in_interrupt(contexts, raw))
                ]
        if self._exits is not None and self._exits.lost:
            trace.notes.append(f"fexit ring buffer overran: {self._exits.lost} returns lost")
        trace.hits = build_hits(
            self.targets,
            self._matchers,
            self._events,
            self._returns,
            kept,
            self._user,
            exits,
            interrupts=interrupts,
        )
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
        return self._settle_live(live, final=False)

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

    def _stop_live(self, live: _Live, inst: Instance) -> Trace:
        """Disarm, read what is left (for `LIVE_FINAL_S` at most: the records still
        unread then count as lost) and hand over every hit not yet returned."""
        inst.disarm()
        until = time.monotonic() + LIVE_FINAL_S
        while time.monotonic() < until and self._take_live(live, inst):
            pass
        live.unread = inst.unread()
        trace = Trace(backend="graph", kernel_release=os.uname().release, arch=os.uname().machine)
        trace.hits = self._settle_live(live, final=True)
        trace.lost = self.lost
        trace.notes = self.notes
        if trace.lost:
            trace.notes.append(f"ring buffers overran: {trace.lost} records lost")
        if live.unread:
            trace.notes.append(f"{live.unread} records still unread at stop (counted as lost)")
        _end_live(inst)
        return trace

    def _take_live(self, live: _Live, inst: Instance) -> bool:
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
        for r in records:
            # Events are not filtered by set_ftrace_notrace_pid: ours go here.
            if r.tgid == mine or r.tid in live.own or not wanted(r):
                continue
            live.add((r.tid, isinstance(r, FunctionRecord) and r.in_irq), r, now)
        for raw in raws:
            if raw.pid == mine or raw.ts_ns <= self._window[0]:
                continue
            irq = self.scope.interrupts and _ran_in_interrupt(live.records, raw)
            if self.scope.kind == "system" or raw.tid in self._tids or irq:
                live.add_exit((raw.tid, irq), self._exit_targets[raw.target], raw, now)
        return True

    def _settle_live(self, live: _Live, final: bool) -> list[Hit]:
        """The complete hits of the contexts that changed (or went quiet); with
        `final`, every hit. Drops the records they used."""
        now, now_ns = time.monotonic(), _clock_ns()
        out: list[Hit] = []
        for context in list(live.records):
            quiet = now - live.arrived[context] >= LIVE_QUIET_S
            due = quiet and now - live.settled.get(context, 0.0) >= LIVE_QUIET_S
            if not (final or context in live.dirty or due):
                continue
            records, exits = live.records[context], live.exits.get(context, {})
            if final or len(records) > LIVE_MAX_PENDING:
                hits, cut = self._build_live(records, exits), len(records)
                live.cut_short += not final
            else:
                hits, cut = self._complete_hits(records, exits, quiet, now_ns)
            out.extend(hits)
            live.consume(context, cut, now)
        out.sort(key=lambda h: h.timestamp_ns)
        return out

    def _build_live(
        self, records: list[FunctionRecord | EventRecord], exits: dict[int, list[RawHit]]
    ) -> list[Hit]:
        return build_hits(
            self.targets,
            self._matchers,
            self._events,
            self._returns,
            records,
            self._user,
            {i: exits.get(i, []) for i in self._exit_targets},
            interrupts=self.scope.interrupts,
        )

    def _complete_hits(
        self,
        records: list[FunctionRecord | EventRecord],
        exits: dict[int, list[RawHit]],
        quiet: bool,
        now_ns: int,
    ) -> tuple[list[Hit], int]:
        """One context's complete hits that its records up to a cut make alone, and
        the cut: the index of the first record a hit not handed over may use (or a
        tracepoint's next hit, as its calls)."""
        hits = self._build_live(records, exits)
        times = [r.ts_ns for r in records]
        index = {t.spec: i for i, t in reversed(list(enumerate(self.targets)))}
        last = {h.target: h for h in hits}  # each target's last hit
        cut = len(records)
        events: dict[int, list[int]] = {}  # an event target -> its events' indexes
        for i, t in enumerate(self.targets):
            if t.kind in ("tp", "uprobe", "uretprobe"):
                at = [k for k, r in enumerate(records) if _live_event(t, self._events[i], r)]
                events[i] = at
                # Its next hit's calls: since its last event, LIVE_HOLD_NS back at most.
                hold = bisect.bisect_left(times, now_ns - LIVE_HOLD_NS)
                cut = min(cut, max(at[-1] + 1 if at else 0, hold))
        start: list[int] = []  # per hit: the first record it may use
        done: list[bool] = []  # per hit: complete
        for h in hits:
            i = index[h.target]
            if i in events:
                at = events[i]
                k = bisect.bisect_left([times[e] for e in at], h.timestamp_ns)
                start.append(at[k - 1] + 1 if k else 0)
                done.append(True)
                continue
            start.append(bisect.bisect_left(times, h.timestamp_ns))
            if (self.targets[i].kind == "kfunc" and i in self._events) or i in self._exit_targets:
                done.append(h.retval is not None)  # at its return event / fexit record
            else:
                done.append(quiet or last[h.target] is not h)  # the thread moved on
        cut = min([cut, *(s for s, d in zip(start, done, strict=True) if not d)])
        while cut < len(records):
            # Complete, and made by the records before the cut alone (not cut short
            # there: the records after it are kept, and must not make it again).
            upto = times[cut - 1] if cut else -1
            alone = {
                _hit_key(h)
                for h in self._build_live(
                    records[:cut],
                    {i: [x for x in xs if x.ts_ns <= upto] for i, xs in exits.items()},
                )
            }
            given = [
                d and s < cut and _hit_key(h) in alone
                for h, s, d in zip(hits, start, done, strict=True)
            ]
            kept = [s for s, g in zip(start, given, strict=True) if not g and s < cut]
            if not kept:
                return [h for h, g in zip(hits, given, strict=True) if g], cut
            cut = min(kept)
        return hits, cut

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

    def _configure(self, inst: Instance) -> None:
        available = None
        programs: list[int] = []
        for i, t in enumerate(self.targets):
            if t.kind == "kfunc":
                assert t.function is not None
                if available is None:
                    available = filter_functions_text(inst.root)
                pattern = t.function
                if not matching_functions(available, pattern):
                    raise CaptureError(
                        f"{t.spec}: no traceable kernel function matches {pattern!r}"
                    )
                self._matchers.append(_glob_matcher(pattern))
                if not t.is_glob:
                    event = inst.add_probe("kprobe", f"r {pattern} ret=$retval")
                    self._returns[event.split("/")[1]] = pattern
                    self._events[i] = event.split("/")[1]
            elif t.kind == "prog":
                from pytest_lbr.capture.progs import resolve_program

                with resolve_program(t) as ref:
                    self._matchers.append(_program_matcher(ref.ksyms, _jited_ranges(ref.fd)))
                programs.append(i)
            elif t.kind == "tp":
                assert t.tracepoint is not None
                try:
                    inst.enable_event(t.tracepoint)
                except TracefsError as exc:
                    raise CaptureError(f"{t.spec}: {exc}") from None
                self._matchers.append(lambda name, addr: False)  # events, not frames
                self._events[i] = t.tracepoint.split("/")[1]
            elif t.kind in ("uprobe", "uretprobe"):
                self._matchers.append(lambda name, addr: False)  # events, not frames
                self._events[i] = self._add_user_probe(inst, i, t)
            else:
                raise CaptureError(f"{t.spec}: not supported on the graph backend")
        self._attach_exits(programs)

    def _attach_exits(self, programs: list[int]) -> None:
        """The LBR tracer's fexit hook on each program target, without snapshots:
        the function tracer cannot see a JITed program return, fexit can."""
        if not programs:
            return
        from pytest_lbr.capture.hooks import HookSet

        # Every process's runs where the scope is not this process; stop() keeps the scope's.
        tgid = os.getpid() if self.scope == Scope() else 0
        hooks = HookSet([self.targets[i] for i in programs], snapshot=False, tgid=tgid)
        try:
            hooks.attach()
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

    def _add_user_probe(self, inst: Instance, index: int, t: Target) -> str:
        """A uprobe (entry, with the return address) or uretprobe event on `t`."""
        assert t.binary is not None and t.function is not None
        if not os.path.exists(t.binary):
            raise CaptureError(f"{t.spec}: no such file {t.binary}")
        path = os.path.realpath(t.binary)
        if any(c.isspace() for c in path):
            raise CaptureError(f"{t.spec}: uprobe_events cannot take a path with spaces")
        try:
            elf = ElfFunctions(path)
            offset = elf.file_offset(t.function)
        except ElfError as exc:
            raise CaptureError(f"{t.spec}: {exc}") from None
        self._user[index] = elf
        if t.kind == "uprobe":
            definition = f"p {path}:{offset:#x} caller={_return_address()}:x64"
        else:
            fetch = elf.return_type(t.function) or "x64"
            definition = f"r {path}:{offset:#x} ret=$retval:{fetch}"
        try:
            return inst.add_probe("uprobe", definition).split("/")[1]
        except TracefsError as exc:
            raise CaptureError(f"{t.spec}: {exc}") from None


def _return_address() -> str:
    """A uprobe fetch argument for the return address at a function's first instruction:
    on the stack where `call` pushes it (x86-64), in the link register where `bl` puts
    it (arm64, register x30)."""
    return "%x30" if os.uname().machine == "aarch64" else "+0(%sp)"


#: Live captures (`GraphCapture.live()`): a thread quiet this long (seconds) has
#: left its last hit of a glob, or of a program whose returns fexit cannot see.
LIVE_QUIET_S = 1.0
#: How far back (trace clock, ns) a live tracepoint or uprobe hit's calls reach.
LIVE_HOLD_NS = 2_000_000_000
#: Records one context may hold for unfinished hits; beyond, they are handed over
#: as they stand (a hit whose return event was lost must not hold a thread forever).
LIVE_MAX_PENDING = 200_000
#: trace_pipe text read per poll at most (the rest waits for the next poll): a
#: poll stays short, so a deadline or Ctrl-C is seen soon.
LIVE_READ_LIMIT = 1 << 20
#: Per-CPU ring buffer of a live capture, KiB: how far the reader may fall behind.
#: Every function of every task ("system") is ~290,000 records a second in the
#: 6.12 guest under TCG, parsed at ~13,000 a second: the reader cannot keep up
#: there, and with the session's 16 MiB it would print hits minutes late.
LIVE_BUFFER_KB = 2048
#: How long `stop()` of a live capture reads what is left before counting the
#: rest as lost (a stop must come soon after Ctrl-C, not after the backlog).
LIVE_FINAL_S = 2.0

#: A context of a live capture: (thread id, in interrupt context).
Context = tuple[int, bool]


class _Live:
    """A live capture between polls: each context's records not yet cut into the
    hits handed over, its fexit records, and when records last came."""

    def __init__(self) -> None:
        self.partial = ""  # text after the last whole line read
        self.own: set[int] = set()  # this process's threads (never recorded)
        self.records: dict[Context, list[FunctionRecord | EventRecord]] = {}
        self.exits: dict[Context, dict[int, list[RawHit]]] = {}
        self.arrived: dict[Context, float] = {}  # monotonic time records last came
        self.settled: dict[Context, float] = {}  # when its hits were last looked at
        self.dirty: set[Context] = set()  # new records since then
        self.cut_short = 0
        self.unread = 0  # records left in the buffer at stop

    def add(self, context: Context, record: FunctionRecord | EventRecord, now: float) -> None:
        self.records.setdefault(context, []).append(record)
        self.arrived[context] = now
        self.dirty.add(context)

    def add_exit(self, context: Context, target: int, raw: RawHit, now: float) -> None:
        self.exits.setdefault(context, {}).setdefault(target, []).append(raw)
        self.records.setdefault(context, [])
        self.arrived[context] = now
        self.dirty.add(context)

    def consume(self, context: Context, cut: int, now: float) -> None:
        """Drop the context's records before index `cut` and the fexit records up to
        the last of them (all of them, and the context, when nothing is left)."""
        records = self.records[context]
        self.dirty.discard(context)
        self.settled[context] = now
        if cut >= len(records):
            for table in (self.records, self.exits, self.arrived, self.settled):
                table.pop(context, None)
            return
        if cut:
            upto = records[cut - 1].ts_ns
            exits = self.exits.get(context, {})
            for i, raws in exits.items():
                exits[i] = [x for x in raws if x.ts_ns > upto]
            self.records[context] = records[cut:]


def _hit_key(hit: Hit) -> tuple[object, ...]:
    """What tells a hit from the same hit cut short (the nesting of its calls may
    differ with the records that follow, their number not)."""
    return (hit.target, hit.tid, hit.in_interrupt, hit.timestamp_ns, hit.retval, len(hit.branches))


def _live_event(target: Target, event: str, record: FunctionRecord | EventRecord) -> bool:
    """Whether `record` is the event that makes a hit of tp/uprobe `target`."""
    if not isinstance(record, EventRecord):
        return False
    return _is_event(record, event) if target.kind == "tp" else record.name == event


def _end_live(inst: Instance) -> None:
    """Undo what a live capture set on the (session's) instance."""
    try:
        inst.set_notrace_pids(())
        inst.write("buffer_size_kb", str(BUFFER_KB))
    except TracefsError:
        pass  # the instance is going away


def _glob_matcher(pattern: str) -> Callable[[str, int], bool]:
    return lambda name, addr: fnmatch.fnmatchcase(name, pattern)


def _program_matcher(
    ksyms: Iterable[str], ranges: list[tuple[int, int]]
) -> Callable[[str, int], bool]:
    """Whether a code location (symbol, address) is inside the program.

    The program's kallsyms names (main program and subprograms: a subprogram has
    its own tag) or, when ftrace printed no name, its JITed address ranges.
    """
    names = frozenset(ksyms)
    return lambda name, addr: name in names or any(lo <= addr < hi for lo, hi in ranges)


def _jited_ranges(fd: int) -> list[tuple[int, int]]:
    """[start, end) of each JITed function of the program (empty if not JITed)."""
    from pytest_lbr.kernel.programs import program_details
    from pytest_lbr.libbpf import BpfError

    try:
        return [(start, start + n) for start, n in program_details(fd).functions]
    except BpfError:
        return []  # the names still identify the program


def build_hits(
    targets: list[Target],
    matchers: list[Callable[[str, int], bool]],
    events: dict[int, str],
    returns: dict[str, str],
    records: Iterable[FunctionRecord | EventRecord],
    user: dict[int, ElfFunctions] | None = None,
    exits: dict[int, list[RawHit]] | None = None,
    *,
    interrupts: bool = False,
) -> list[Hit]:
    """Cut the kept records into hits, per thread, in time order.

    `matchers[i]` says whether a code location (symbol, address) is target i:
    a kfunc's function, or anywhere inside a BPF program;
    `events[i]` names target i's event (a tracepoint, or the kretprobe carrying
    a kfunc's return value, a uprobe's event); `returns` maps a kretprobe event
    to its function; `user[i]` holds the symbols of uprobe target i's binary;
    `exits[i]` holds the fexit records of program target i (its runs' returns).

    Records made in interrupt context are dropped, or with `interrupts` kept
    as a context of their own beside the interrupted thread's (a NAPI poll
    running an XDP program on whatever task the softirq came in on): their
    hits have `in_interrupt` set.

    A hardirq that comes in on interrupt-context work (a timer tick in the
    middle of an XDP program's run in a NAPI poll) is a context of its own
    too: it is not that work's, as an interrupt is not the thread's. Kept with
    it, its calls nested into the run and cut it into two hits, the second
    taking in the rest of the poll. ftrace flags both kinds as irq alike; in
    a thread's interrupt records, `irq_enter_rcu` opens such a hardirq (one
    that interrupts a task is entered before the irq bit is set: its
    `irq_enter_rcu` is among the task's records) and `irq_exit_rcu` closes it.
    """
    forever = 1 << 63
    by_context: dict[tuple[int, bool], list[FunctionRecord | EventRecord]] = {}
    nested: dict[int, list[FunctionRecord | EventRecord]] = {}  # hardirqs on interrupt work
    spans: dict[int, list[list[int]]] = {}  # tid -> [start, end] of each such hardirq
    for r in records:
        irq = isinstance(r, FunctionRecord) and r.in_irq
        if interrupts and isinstance(r, FunctionRecord) and irq:
            open_span = spans.get(r.tid, [[0, 0]])[-1]
            if r.func == "irq_enter_rcu":
                if open_span[1] == forever:
                    open_span[1] = r.ts_ns  # its exit was not recorded
                spans.setdefault(r.tid, []).append([r.ts_ns, forever])
            elif r.func in ("irq_exit_rcu", "__irq_exit_rcu") and open_span[1] == forever:
                open_span[1] = r.ts_ns
        if isinstance(r, FunctionRecord) and (
            (irq and not interrupts) or r.parent == TRACE_CLOCK or _interrupt_edge(r)
        ):
            continue  # interrupts are not the thread's work, clock reads are ftrace's
        if irq and spans.get(r.tid, [[0, 0]])[-1][1] == forever:
            nested.setdefault(r.tid, []).append(r)
            continue
        by_context.setdefault((r.tid, irq), []).append(r)
    exits = exits or {}
    # (tid, in interrupt context, in a hardirq that came in on interrupt-context work)
    contexts: dict[tuple[int, bool, bool], list[FunctionRecord | EventRecord]] = {
        (tid, irq, False): recs for (tid, irq), recs in by_context.items()
    }
    contexts.update({(tid, True, True): recs for tid, recs in nested.items()})
    exits_in: dict[tuple[int, bool, bool], dict[int, list[RawHit]]] = {}
    for i, raws in exits.items():
        for raw in raws:
            irq = interrupts and _ran_in_interrupt(by_context, raw)
            inner = irq and any(lo <= raw.ts_ns <= hi for lo, hi in spans.get(raw.tid, []))
            context = (raw.tid, irq, inner)
            contexts.setdefault(context, [])  # a run that called nothing has no records
            exits_in.setdefault(context, {}).setdefault(i, []).append(raw)
    hook_times = sorted(r.ts_ns for rs in exits.values() for r in rs)
    hits: list[Hit] = []
    for (tid, irq, inner), recs in contexts.items():
        recs = _without_exit_hooks(recs, hook_times)
        steps = list(reconstruct(recs, returns))
        mine = exits_in.get((tid, irq, inner), {})
        found: list[Hit] = []
        for i, target in enumerate(targets):
            if target.kind == "tp":
                found.extend(_event_hits(target, events[i], tid, steps))
            elif target.kind in ("uprobe", "uretprobe"):
                assert user is not None
                found.extend(_user_hits(target, events[i], user[i], tid, steps))
            elif target.kind == "prog":
                runs = _program_runs(target, matchers[i], tid, recs)
                if i in exits:
                    runs = _with_returns(target, tid, runs, mine.get(i, []))
                found.extend(runs)
            else:
                found.extend(_frame_hits(target, matchers[i], events.get(i), tid, steps))
        pid, comm = _task_of(tid, recs, [r for rs in mine.values() for r in rs])
        for hit in found:
            hit.pid, hit.comm, hit.in_interrupt = pid, comm, irq
        hits.extend(found)
    hits.sort(key=lambda h: h.timestamp_ns)
    return hits


def _ran_in_interrupt(
    by_context: dict[tuple[int, bool], list[FunctionRecord | EventRecord]], raw: RawHit
) -> bool:
    """Whether a program run whose fexit record is `raw` ran in interrupt context.

    The hook cannot tell; the function tracer can: the thread's last record
    before the return is the program's last call, or what ran just before it.
    """

    def last_before(records: list[FunctionRecord | EventRecord]) -> int:
        # Records are in time order: a search, not a list of their times per call
        # (called once per fexit record: a repeated test run has thousands).
        k = bisect.bisect_right(records, raw.ts_ns, key=lambda r: r.ts_ns)
        return records[k - 1].ts_ns if k else -1

    irq = last_before(by_context.get((raw.tid, True), []))
    return irq >= 0 and irq >= last_before(by_context.get((raw.tid, False), []))


def _task_of(
    tid: int, records: list[FunctionRecord | EventRecord], exits: list[RawHit]
) -> tuple[int, str]:
    """The process id and command name of thread `tid`, from its records (ftrace's
    record-tgid), its fexit records, or /proc while it still runs."""
    pid = next((r.tgid for r in records if r.tgid), 0) or next((r.pid for r in exits), 0)
    comm = next((r.comm for r in records if r.comm), "")
    if not pid:
        try:
            with open(f"/proc/{tid}/status") as f:
                pid = next((int(line.split()[1]) for line in f if line.startswith("Tgid:")), 0)
        except (OSError, ValueError):
            pid = 0
    return pid, comm


def _without_exit_hooks(
    records: list[FunctionRecord | EventRecord], hook_times: Iterable[int]
) -> list[FunctionRecord | EventRecord]:
    """One thread's function records without those of our fexit hooks (`EXIT_HOOK_FRAMES`).

    The trampoline's helpers are notrace: only what they call names them, as the
    parent. A hook runs from the first record called by `__bpf_prog_enter*` to
    the last one called by the next `__bpf_prog_exit*` (and what those called);
    it is ours when one of `hook_times` (when our fexit program ran: its records'
    bpf_ktime_get_ns) falls in between, so a user's fentry/fexit program stays.
    Records called by `__bpf_tramp_enter`/`exit` (and their callees) are dropped
    wherever they are. Cut by time, not by name: the tracer program's kallsyms
    name may be the traced program's, and some of what it calls is notrace
    (bpf_ringbuf_commit), so its callees name a parent never entered.
    """
    times = sorted(hook_times)
    funcs = [r if isinstance(r, FunctionRecord) else None for r in records]
    drop = [False] * len(records)

    def called_by(r: FunctionRecord | None, key: str) -> bool:
        return r is not None and fnmatch.fnmatchcase(r.parent or "", EXIT_HOOK_FRAMES[key])

    def drop_calls(start: int, key: str) -> int:
        """Drop the records from `start` on called by `key` or by what they entered."""
        entered: set[str] = set()
        i = start
        while i < len(records):
            r = funcs[i]
            if r is not None:
                if not (called_by(r, key) or r.parent in entered):
                    break
                entered.add(r.func)
                drop[i] = True
            i += 1
        return i

    i = 0
    while i < len(records):
        r = funcs[i]
        if called_by(r, "trampoline"):
            i = drop_calls(i, "trampoline")
            continue
        if r is not None and called_by(r, "enter"):
            end = next((j for j in range(i + 1, len(records)) if called_by(funcs[j], "exit")), None)
            if end is not None and _any_between(times, r.ts_ns, records[end].ts_ns):
                for j in range(i, end):
                    drop[j] = funcs[j] is not None
                i = drop_calls(end, "exit")
                continue
        i += 1
    return [r for r, gone in zip(records, drop, strict=True) if not gone]


def _any_between(times: list[int], lo: int, hi: int) -> bool:
    k = bisect.bisect_left(times, lo)
    return k < len(times) and times[k] <= hi


def _with_returns(target: Target, tid: int, runs: list[Hit], exits: list[RawHit]) -> list[Hit]:
    """Give each run its return value: a run ends at its fexit record.

    A fexit record with no run before it is a run that called nothing: a hit
    with no branches. A run with no fexit record after it (lost) keeps None.
    """
    pending = sorted(runs, key=lambda h: h.timestamp_ns)
    out: list[Hit] = []
    for raw in sorted(exits, key=lambda r: r.ts_ns):
        if pending and pending[0].timestamp_ns <= raw.ts_ns:
            hit = pending.pop(0)
        else:
            hit = Hit(target.spec, cpu=raw.cpu, pid=os.getpid(), tid=tid, timestamp_ns=raw.ts_ns)
        hit.retval = raw.retval
        out.append(hit)
    return out + pending


def _frame_hits(
    target: Target,
    match: Callable[[str, int], bool],
    ret_event: str | None,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """One hit per outermost frame of a matching function, with everything under it."""
    if ret_event is not None:
        return _hits_until_return(target, match, ret_event, tid, steps)
    hits: list[Hit] = []
    hit: Hit | None = None
    depth = 0
    for step in steps:
        if hit is None:
            frame = step.frame
            if step.kind == "call" and frame is not None and match(frame.func, frame.addr):
                if any(match(f.func, f.addr) for f in step.stack[:-1]):
                    continue
                rec = step.record
                hit = Hit(target.spec, pid=os.getpid(), tid=tid)
                hit.cpu, hit.timestamp_ns = (rec.cpu, rec.ts_ns) if rec else _when(steps, step)
                depth = len(step.stack)
                _append(hit, step)
            continue
        if step.kind == "event":
            rec = step.record
            # Our frame's return only if no nested call of the function is above it.
            if (
                isinstance(rec, EventRecord)
                and rec.name == ret_event
                and not any(match(f.func, f.addr) for f in step.stack[depth:])
            ):
                hit.retval = _retval(rec.body)
            continue
        _append(hit, step)
        if step.kind == "ret" and len(step.stack) == depth:
            hits.append(hit)
            hit = None
    if hit is not None:
        hits.append(hit)
    return hits


def _hits_until_return(
    target: Target,
    match: Callable[[str, int], bool],
    ret_event: str,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """With a kretprobe on the function, a hit runs from its call to its return event.

    Every record of the thread in between is the function's own work, however the
    call-only records nest: a frame popped early because some caller was never
    recorded must not cut one call into several hits (seen with tcp_v4_connect).
    The returns that follow the event still belong to the hit.
    """
    hits: list[Hit] = []
    hit: Hit | None = None
    open_calls = 0
    returning = False
    depth = 0  # of the hit's frame
    for step in steps:
        frame = step.frame
        recorded_call = (
            step.kind == "call"
            and frame is not None
            and step.record is not None
            and match(frame.func, frame.addr)
        )
        if hit is None:
            # The returns from the hit's frame and the frames above it, which its
            # return event pops; not those of its callers (the next record's).
            if returning and step.kind == "ret" and hits and len(step.stack) >= depth:
                _append(hits[-1], step)
                continue
            returning = False
            if recorded_call:
                rec = step.record
                assert rec is not None
                hit = Hit(
                    target.spec, pid=os.getpid(), tid=tid, cpu=rec.cpu, timestamp_ns=rec.ts_ns
                )
                open_calls, depth = 1, len(step.stack)
                _append(hit, step)
            continue
        if step.kind == "event":
            rec = step.record
            if isinstance(rec, EventRecord) and rec.name == ret_event:
                open_calls -= 1
                if open_calls == 0:
                    hit.retval = _retval(rec.body)
                    hits.append(hit)
                    hit, returning = None, True
            continue
        if recorded_call:
            open_calls += 1  # a real nested (recursive) call
        _append(hit, step)
    if hit is not None:
        hits.append(hit)
    return hits


def _program_runs(
    target: Target,
    in_program: Callable[[str, int], bool],
    tid: int,
    records: list[FunctionRecord | EventRecord],
) -> list[Hit]:
    """One hit per run of a BPF program: the calls it made and what they called.

    A JITed program has no ftrace entry, so a run shows only as records whose
    parent (the call site) is inside the program or one of its subprograms.
    Two stacks are kept: `outer` for the thread's own calls outside any run (the
    BPF_PROG_TEST_RUN machinery, the syscall), `inner` for the calls of the
    current run and everything nested under them. A record whose parent is the
    program returns from everything `inner` holds, then is a call of the run
    (starting one if none is open). A record whose parent is on `outer` and not
    on `inner` is the machinery again: the run is over (this is what separates
    the runs of one BPF_PROG_TEST_RUN with repeat > 1, and two test runs).
    """
    hits: list[Hit] = []
    hit: Hit | None = None
    outer: list[str] = []
    inner: list[Frame] = []

    def pop_to(depth: int) -> None:
        assert hit is not None
        while len(inner) > depth:
            _append(hit, Step("ret", inner[-1], list(inner)))
            inner.pop()

    def close() -> None:
        nonlocal hit
        assert hit is not None
        pop_to(0)
        hits.append(hit)
        hit = None

    mentions = Mentions(records, {})
    for index, rec in enumerate(records):
        if not isinstance(rec, FunctionRecord):
            continue
        parent = rec.parent or ""
        if in_program(parent, rec.parent_addr):
            if hit is None:
                hit = Hit(target.spec, cpu=rec.cpu, pid=os.getpid(), tid=tid)
                hit.timestamp_ns = rec.ts_ns
            # The program called again: its previous call has returned.
            pop_to(0)
        elif hit is not None:
            depth = innermost_call(inner, parent)
            if depth is not None:
                pop_to(depth + 1)
            elif parent in outer:
                close()
            else:
                # A parent never recorded (notrace, e.g. an out-of-line `inline`
                # function): an unseen caller, under the innermost call known to
                # be still running (or the program itself), not under the top.
                running = mentions.innermost_running(inner, index)
                pop_to(0 if running is None else running + 1)
                inner.append(Frame(parent, rec.parent_addr - rec.parent_off))
                _append(hit, Step("call", inner[-1], list(inner)))
        if hit is None:
            depth = innermost(outer, parent.__eq__)
            if depth is not None:
                del outer[depth + 1 :]  # the innermost frame of that name
            elif parent:
                outer.append(parent)
            outer.append(rec.func)
            continue
        inner.append(Frame(rec.func, rec.func_addr, rec))
        _append(hit, Step("call", inner[-1], list(inner)))
    if hit is not None:
        close()
    return hits


def _event_hits(target: Target, event: str, tid: int, steps: list[Step]) -> list[Hit]:
    """One hit per event line, with the thread's branches since the previous one."""
    hits: list[Hit] = []
    pending = Hit(target.spec, pid=os.getpid(), tid=tid)
    for step in steps:
        rec = step.record
        if step.kind == "event" and isinstance(rec, EventRecord) and _is_event(rec, event):
            pending.cpu, pending.timestamp_ns = rec.cpu, rec.ts_ns
            hits.append(pending)
            pending = Hit(target.spec, pid=os.getpid(), tid=tid)
        elif step.kind != "event":
            _append(pending, step)
    return hits


def _user_hits(
    target: Target,
    event: str,
    elf: ElfFunctions,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """One hit per uprobe/uretprobe event line of this thread.

    A hit holds the thread's kernel calls since its previous hit of this target
    (or since the trace was armed, or the thread started), then the user-level
    edge: the call into the function (entry) or the return to the caller.
    Entry body: "(0xIP) caller=0xRET"; return body: "(0xFUNC <- 0xRET) ret=0xV".
    Run-time addresses are mapped back into the file with the function's own
    address (known from the symbol table), which gives the caller's name.
    """
    assert target.function is not None
    func_vaddr = elf.address(target.function)
    hits: list[Hit] = []
    kernel = Hit(target.spec)  # the kernel calls since the previous hit
    for step in steps:
        rec = step.record
        if step.kind != "event":
            _append(kernel, step)
            continue
        if not isinstance(rec, EventRecord) or rec.name != event:
            continue
        addrs = _hex_fields(rec.body)
        if not addrs:
            continue
        entry = addrs[0]
        site = addrs[1] if len(addrs) > 1 else None
        bias = entry - func_vaddr
        hit = Hit(target.spec, cpu=rec.cpu, pid=tid, tid=tid, timestamp_ns=rec.ts_ns)
        hit.branches, hit.raw_branches = kernel.branches, kernel.raw_branches
        kernel = Hit(target.spec)
        func = Location(entry, target.function, 0, module=elf.path.name)
        if site is not None:
            found = elf.locate(site - bias)
            caller = Location(
                site,
                found[0] if found else None,
                found[1] if found else 0,
                module=elf.path.name,
            )
            if target.kind == "uprobe":
                branch = Branch(caller, func, "call")
            else:
                branch = Branch(func, caller, "ret")
            hit.branches.append(branch)
            hit.raw_branches.append(branch)
        if target.kind == "uretprobe":
            hit.retval = _retval(rec.body)
        hits.append(hit)
    return hits


def _hex_fields(body: str) -> list[int]:
    """The probe address and the call site: "(0xA)", "(0xA <- 0xB)", "caller=0xB"."""
    out: list[int] = []
    for part in body.replace("(", " ").replace(")", " ").split():
        value = part.split("=", 1)[1] if part.startswith("caller=") else part
        if value.startswith("0x"):
            try:
                out.append(int(value, 16))
            except ValueError:
                continue
    return out


def _is_event(rec: EventRecord, event: str) -> bool:
    if rec.name == event:
        return True
    # Syscall events print "sys_NAME(args)" / "sys_NAME -> ret", not their event name.
    for prefix in ("sys_enter_", "sys_exit_"):
        if event.startswith(prefix):
            call = "sys_" + event[len(prefix) :]
            want = "(" if prefix == "sys_enter_" else " -> "
            return rec.body.startswith(call + want)
    return False


def _when(steps: list[Step], step: Step) -> tuple[int, int]:
    """cpu and time of the first record at or after `step` (an unseen frame has none)."""
    for s in steps[steps.index(step) :]:
        if isinstance(s.record, FunctionRecord):
            return s.record.cpu, s.record.ts_ns
    return 0, 0


def _append(hit: Hit, step: Step) -> None:
    frame = step.frame
    if frame is None:
        return
    call = frame.call
    entry = Location(frame.addr, frame.func, 0)
    if call is None:
        # Entered unseen: an explicit frame whose caller is unknown.
        branch = (
            Branch(UNSEEN_CALLER, entry, "unseen")
            if step.kind == "call"
            else Branch(entry, UNSEEN_CALLER, "ret")
        )
    elif step.kind == "call":
        site = Location(call.parent_addr, call.parent, call.parent_off)
        branch = Branch(site, entry, "call")
    else:
        # Function tracing does not see the ret instruction: the return is shown
        # from the function (+0x0) back to its call site.
        site = Location(call.parent_addr, call.parent, call.parent_off)
        branch = Branch(entry, site, "ret")
    hit.raw_branches.append(branch)
    if not any(f.func in PROBE_HANDLERS for f in step.stack):
        hit.branches.append(branch)


def _retval(body: str) -> int | None:
    # kretprobe event body: "(vfs_write+0x0/0x3f0 <- ksys_write+0x6a/0xe0) ret=0x1"
    for part in body.split():
        if part.startswith("ret="):
            value = int(part[4:], 0)
            return value - (1 << 64) if value >= 1 << 63 else value
    return None


if TYPE_CHECKING:  # mypy checks the backend keeps to the protocols
    _driver: type[BackendDriver] = GraphBackend
    _capture: type[Capture] = GraphCapture
