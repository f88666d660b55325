"""The graph backend's hits, built from the function tracer's records (pure: no I/O).

`build_hits` cuts a capture's kept records into hits, each target's by its kind
(`pytest_lbr.capture.kinds`, one module a kind, says what a hit of each kind holds): per thread and,
with interrupts kept, per interrupt context beside it; the records the LBR
tracer's fexit hooks leave in a program's run are stripped first. Everything
here works on records already read (`pytest_lbr.capture.graph.text`), so host
tests reach it with real captured text and no tracefs.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_lbr.capture.graph.calls import Mentions, SiteFinder, Step, reconstruct
from pytest_lbr.capture.graph.own import TracerOwn
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.graph.trampoline import without_exit_hooks
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.capture.kinds.protocol import HitCutting
from pytest_lbr.model import Hit
from pytest_lbr.noise import (
    IRQ_EDGE_FUNCTIONS,
    IRQ_EDGE_PARENTS,
    IRQ_ENTRY,
    IRQ_EXITS,
    TRACE_CLOCK,
)
from pytest_lbr.targets import Target

if TYPE_CHECKING:  # pyelftools: imported only where a uprobe target's binary is read
    from pytest_lbr.symbols.elf import ElfFunctions

__all__ = [
    "HitBuilder",
    "build_hits",
    "descendants",
    "hit_event",
    "ran_in_interrupt",
]


def _interrupt_edge(r: FunctionRecord) -> bool:
    """A record of interrupt entry/exit code that ftrace's flags do not mark as irq."""
    return r.func in IRQ_EDGE_FUNCTIONS or bool(r.parent and _interrupt_edge_parent(r.parent))


@functools.lru_cache(maxsize=4096)
def _interrupt_edge_parent(parent: str) -> bool:
    """`IRQ_EDGE_PARENTS`, asked once per name (it is asked for every record)."""
    return IRQ_EDGE_PARENTS.match(parent) is not None


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


@dataclass
class HitBuilder:
    """What `build_hits` needs besides the records, as a capture configured it."""

    targets: Sequence[Target]
    matchers: list[Callable[[str, int], bool]] = field(default_factory=list)
    events: dict[int, str] = field(default_factory=dict)
    returns: dict[str, str] = field(default_factory=dict)
    user: dict[int, ElfFunctions] = field(default_factory=dict)
    #: The program targets whose returns come from fexit records.
    exit_targets: list[int] = field(default_factory=list)
    interrupts: bool = False
    #: Program target index -> its JITed functions' start addresses (main first).
    starts: dict[int, list[tuple[str | None, int]]] = field(default_factory=dict)
    #: Where a caller calls a function the tracer did not record (`SiteFinder`).
    site_of: SiteFinder | None = None
    #: A live thread's process id, for a thread whose records do not say it (the
    #: backend's: it reads /proc; this module does no I/O).
    tgid_of: Callable[[int], int] | None = None

    def build(
        self,
        records: Iterable[FunctionRecord | EventRecord],
        exits: dict[int, list[RawHit]],
        open_ended: list[bool] | None = None,
    ) -> list[Hit]:
        """`build_hits` of `records` and the fexit records `exits` (by target index)."""
        return build_hits(
            list(self.targets),
            self.matchers,
            self.events,
            self.returns,
            records,
            self.user,
            {i: exits.get(i, []) for i in self.exit_targets},
            interrupts=self.interrupts,
            open_ended=open_ended,
            starts=self.starts,
            site_of=self.site_of,
            tgid_of=self.tgid_of,
        )


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
    open_ended: list[bool] | None = None,
    starts: dict[int, list[tuple[str | None, int]]] | None = None,
    site_of: SiteFinder | None = None,
    tgid_of: Callable[[int], int] | None = None,
) -> list[Hit]:
    """Cut the kept records into hits, per thread, in time order.

    `matchers[i]` says whether a code location (symbol, address) is target i:
    a kfunc's function, or anywhere inside a BPF program;
    `events[i]` names target i's event (a tracepoint, or the kretprobe carrying
    a kfunc's return value, a uprobe's event); `returns` maps a kretprobe event
    to its function; `user[i]` holds the symbols of uprobe target i's binary;
    `exits[i]` holds the fexit records of program target i (its runs' returns).
    `open_ended`, if given, gets True added when nesting a thread's records
    looked for records after its last one (`Mentions.looked_past_end`): more
    records could nest them differently. `starts` and `site_of` give a function
    the tracer did not record its caller (`_program_runs`, `reconstruct`);
    `tgid_of` the process of a thread whose records do not name it (0: unknown).

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
    tracer_own = TracerOwn()
    by_context: dict[tuple[int, bool], list[FunctionRecord | EventRecord]] = {}
    nested: dict[int, list[FunctionRecord | EventRecord]] = {}  # hardirqs on interrupt work
    spans: dict[int, list[list[int]]] = {}  # tid -> [start, end] of each such hardirq
    for r in records:
        irq = isinstance(r, FunctionRecord) and r.in_irq
        if interrupts and isinstance(r, FunctionRecord) and irq:
            open_span = spans.get(r.tid, [[0, 0]])[-1]
            if r.func == IRQ_ENTRY:
                if open_span[1] == forever:
                    open_span[1] = r.ts_ns  # its exit was not recorded
                spans.setdefault(r.tid, []).append([r.ts_ns, forever])
            elif r.func in IRQ_EXITS and open_span[1] == forever:
                open_span[1] = r.ts_ns
        if isinstance(r, FunctionRecord) and (
            (irq and not interrupts)
            or r.parent == TRACE_CLOCK
            or _interrupt_edge(r)
            or tracer_own.dropped(r)
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
            irq = interrupts and ran_in_interrupt(by_context, raw)
            inner = irq and any(lo <= raw.ts_ns <= hi for lo, hi in spans.get(raw.tid, []))
            context = (raw.tid, irq, inner)
            contexts.setdefault(context, [])  # a run that called nothing has no records
            exits_in.setdefault(context, {}).setdefault(i, []).append(raw)
    hook_times = sorted(r.ts_ns for rs in exits.values() for r in rs)
    # Program runs are cut from the records (`kinds.prog.program_runs`): nesting them all, with
    # its call-site searches, is for the other kinds and a live capture's `open_ended`.
    nest = open_ended is not None or not all(t.is_program for t in targets)
    hits: list[Hit] = []
    for (tid, irq, inner), recs in contexts.items():
        recs = without_exit_hooks(recs, hook_times)
        steps: list[Step] = []
        if nest:
            mentions = Mentions(recs, returns)
            steps = list(reconstruct(recs, returns, mentions, site_of))
            if open_ended is not None and mentions.looked_past_end:
                open_ended.append(True)
        mine = exits_in.get((tid, irq, inner), {})
        cut = HitCutting(
            tid, recs, steps, matchers, events, user, exits, mine, starts or {}, site_of
        )
        found = [h for i, t in enumerate(targets) for h in kind_of(t).graph_hits(cut, i, t)]
        pid, comm = _task_of(tid, recs, [r for rs in mine.values() for r in rs], tgid_of)
        for hit in found:
            hit.pid, hit.comm, hit.in_interrupt = pid, comm, irq
        hits.extend(found)
    hits.sort(key=lambda h: h.timestamp_ns)
    return hits


def ran_in_interrupt(
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
    tid: int,
    records: list[FunctionRecord | EventRecord],
    exits: list[RawHit],
    tgid_of: Callable[[int], int] | None,
) -> tuple[int, str]:
    """The process id and command name of thread `tid`, from its records (ftrace's
    record-tgid), its fexit records, or `tgid_of` (the live thread's)."""
    pid = next((r.tgid for r in records if r.tgid), 0) or next((r.pid for r in exits), 0)
    comm = next((r.comm for r in records if r.comm), "")
    if not pid and tgid_of is not None:
        pid = tgid_of(tid)
    return pid, comm


def hit_event(target: Target, event: str, record: FunctionRecord | EventRecord) -> bool:
    """Whether `record` is the event that makes a hit of `target` (a tracepoint, a
    uprobe: `event`, the target's event name, as `build_hits` takes it)."""
    return kind_of(target).hit_event(event, record)
