"""The graph backend's hits, built from the function tracer's records (pure: no I/O).

`build_hits` cuts a capture's kept records into hits per target kind (see
`pytest_lbr.capture.graph.backend` for what a hit of each kind holds): per thread and,
with interrupts kept, per interrupt context beside it; the records the LBR
tracer's fexit hooks leave in a program's run are stripped first. Everything
here works on records already read (`pytest_lbr.capture.graph.text`), so host
tests reach it with real captured text and no tracefs.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_lbr.capture.graph.calls import (
    Frame,
    Mentions,
    SiteFinder,
    Step,
    called_by_program,
    calling_frame,
    innermost,
    innermost_call,
    is_exception_handler,
    reconstruct,
    unseen_frame,
)
from pytest_lbr.capture.graph.own import TracerOwn
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.graph.trampoline import trampoline_frame, without_exit_hooks
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.model import EXCEPTION_ENTRY, UNSEEN_CALLER, Branch, Hit, Location
from pytest_lbr.noise import IRQ_EDGE_FUNCTIONS, IRQ_EDGE_PARENTS, PROBE_HANDLERS, TRACE_CLOCK
from pytest_lbr.targets import Target

if TYPE_CHECKING:  # pyelftools: imported only where a uprobe target's binary is read
    from pytest_lbr.symbols.elf import ElfFunctions

__all__ = [
    "HitBuilder",
    "build_hits",
    "descendants",
    "glob_matcher",
    "hit_event",
    "program_matcher",
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


def glob_matcher(pattern: str) -> Callable[[str, int], bool]:
    """Whether a code location (symbol, address) is a function `pattern` names."""
    if not any(c in pattern for c in "*?["):
        return lambda name, addr: name == pattern  # one function: asked at every call
    match = re.compile(fnmatch.translate(pattern)).match
    return lambda name, addr: match(name) is not None


def program_matcher(
    ksyms: Iterable[str], ranges: list[tuple[int, int]]
) -> Callable[[str, int], bool]:
    """Whether a code location (symbol, address) is inside the program.

    The program's kallsyms names (main program and subprograms: a subprogram has
    its own tag) or, when ftrace printed no name, its JITed address ranges.
    """
    names = frozenset(ksyms)

    def inside(name: str, addr: int) -> bool:
        if name in names:
            return True
        for lo, hi in ranges:  # a loop, not any(): asked for every record
            if lo <= addr < hi:
                return True
        return False

    return inside


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
            if r.func == "irq_enter_rcu":
                if open_span[1] == forever:
                    open_span[1] = r.ts_ns  # its exit was not recorded
                spans.setdefault(r.tid, []).append([r.ts_ns, forever])
            elif r.func in ("irq_exit_rcu", "__irq_exit_rcu") and open_span[1] == forever:
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
    # Program runs are cut from the records (`_program_runs`): nesting them all, with
    # its call-site searches, is for the other kinds and a live capture's `open_ended`.
    nest = open_ended is not None or any(t.kind != "prog" for t in targets)
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
        found: list[Hit] = []
        for i, target in enumerate(targets):
            if target.kind == "tp":
                found.extend(_event_hits(target, events[i], tid, steps))
            elif target.kind in ("uprobe", "uretprobe"):
                assert user is not None
                found.extend(_user_hits(target, events[i], user[i], tid, steps))
            elif target.kind == "prog":
                ends = sorted(r.ts_ns for r in mine.get(i, []))
                mine_starts = (starts or {}).get(i, ())
                others = [v for k, v in (starts or {}).items() if k != i]
                other_ends = sorted(r.ts_ns for k, rs in mine.items() if k != i for r in rs)
                runs = _program_runs(
                    target, matchers[i], tid, recs, ends, mine_starts, site_of, others, other_ends
                )
                if i in exits:
                    runs = _with_returns(target, tid, runs, mine.get(i, []))
                found.extend(runs)
            else:
                found.extend(_frame_hits(target, matchers[i], events.get(i), tid, steps))
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
        if hit is not None and recorded_call and len(step.stack) <= depth:
            # Called again where the hit's own frame was: the nesting popped it, so
            # it returned and its return event never came (records lost when the
            # ring buffer overran, or a kretprobe's missed return). Without this
            # one lost event would make every later call of the thread's part of it.
            hits.append(hit)
            hit = None  # and this call starts the next hit, below
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
    ends: Sequence[int] = (),
    starts: Sequence[tuple[str | None, int]] = (),
    site_of: SiteFinder | None = None,
    others: Sequence[Sequence[tuple[str | None, int]]] = (),
    other_ends: Sequence[int] = (),
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
    `ends` (sorted) are when runs returned (their fexit records): a record after
    one is a later run's, even where no machinery was recorded between them (a
    system-wide trace narrowed to the program's calls records none).
    `starts`: the program's JITed functions (kallsyms name, address; main first), where `site_of` looks
    for the call of an unrecorded function the program called; `others`: the
    other program targets' (a first call that one of them makes too starts no
    run, unless the fexit returns say whose run it was: this program's return
    comes before any of theirs, `other_ends`, sorted).
    """
    hits: list[Hit] = []
    hit: Hit | None = None
    outer: list[str] = []
    inner: list[Frame] = []
    #: The program's latest call site in this run: (function name, start, return address).
    site: tuple[str | None, int, int] | None = None

    def pop_to(depth: int) -> None:
        assert hit is not None
        while len(inner) > depth:
            _append(hit, Step("ret", inner[-1], list(inner)))
            inner.pop()

    def close() -> None:
        nonlocal hit, site
        assert hit is not None
        pop_to(0)
        hits.append(hit)
        hit, site = None, None

    mentions: list[Mentions] = []  # made when first asked: most runs never ask
    next_end = 0
    for index, rec in enumerate(records):
        if not isinstance(rec, FunctionRecord):
            continue
        while next_end < len(ends) and ends[next_end] < rec.ts_ns:
            next_end += 1
            if hit is not None:
                close()
        parent = rec.parent or ""
        if hit is not None and trampoline_frame(parent):
            close()  # a tracing program returned to its trampoline: the run is over
        if in_program(parent, rec.parent_addr):
            if hit is None:
                hit = Hit(target.spec, cpu=rec.cpu, pid=os.getpid(), tid=tid)
                hit.timestamp_ns = rec.ts_ns
            site = (rec.parent, rec.parent_addr - rec.parent_off, rec.parent_addr)
            # The program called again: its previous call has returned.
            pop_to(0)
        elif hit is None and starts and parent not in outer and not trampoline_frame(parent):
            # A run whose first call went to a function the tracer cannot record
            # (an iterator calling bpf_seq_printf): its callee names it as parent,
            # and the program's code calls it, and no other traced program's does
            # (two programs printing: whose call it was is unknown).
            frame = called_by_program(rec, None, starts, site_of)
            k = bisect.bisect_left(other_ends, rec.ts_ns)
            returns_first = next_end < len(ends) and (
                k == len(other_ends) or ends[next_end] < other_ends[k]
            )
            if frame.call is not None and (
                returns_first
                or not any(
                    called_by_program(rec, None, o, site_of).call is not None for o in others
                )
            ):
                hit = Hit(target.spec, cpu=rec.cpu, pid=os.getpid(), tid=tid)
                hit.timestamp_ns = rec.ts_ns
                call = frame.call
                site = (call.parent, call.parent_addr - call.parent_off, call.parent_addr)
                inner.append(frame)
                _append(hit, Step("call", frame, list(inner)))
            elif frame.call is not None:
                # Another traced program's call of a helper this one calls too: not
                # this thread's own machinery, so it goes on no stack (on `outer`, a
                # later call of it in this program's run would end the run).
                continue
        elif hit is not None:
            depth = innermost_call(inner, parent)
            if depth is not None:
                pop_to(depth + 1)
                inner[depth].last_site = rec.parent_addr
            elif parent in outer:
                close()
            else:
                # A parent never recorded (notrace: a helper in kernel/trace/, an
                # out-of-line `inline` function): called by the innermost frame (or
                # the program) whose code calls it; where none does, under the
                # innermost call known to be still running, not under the top.
                mentions = mentions or [Mentions(records, {})]
                running = mentions[0].innermost_running(inner, index)
                caller: int | None = None
                entered: list[Frame] = []
                if inner:  # from the top: the tracer records no returns
                    caller, entered = calling_frame(rec, inner, len(inner) - 1, site_of)
                if caller is None and is_exception_handler(parent):
                    caller = len(inner) - 1 if inner else None  # it faulted where it ran
                    entered = [unseen_frame(rec, None, None)]
                elif caller is None:
                    # No frame's code calls it: the program's may, else it stays
                    # under the running one, its caller unknown.
                    by_program = called_by_program(rec, site, starts, site_of)
                    if by_program.call is not None or running is None:
                        entered = [by_program]
                    else:
                        caller = running
                    if inner and by_program.call is not None and _callback(by_program, site):
                        # Another function of the program called it: a callback, run by
                        # the helper still running (bpf_find_vma), so nested in it.
                        caller = running if running is not None else len(inner) - 1
                pop_to(0 if caller is None else caller + 1)
                if caller is None and entered[0].call is not None:
                    call = entered[0].call
                    site = (call.parent, call.parent_addr - call.parent_off, call.parent_addr)
                for frame in entered:
                    inner.append(frame)
                    _append(hit, Step("call", frame, list(inner)))
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


def _callback(frame: Frame, site: tuple[str | None, int, int] | None) -> bool:
    """Whether `frame` was entered from another function of the program than the one
    of its latest call `site`: a BPF callback, which a helper runs."""
    call = frame.call
    return call is not None and site is not None and call.parent_addr - call.parent_off != site[1]


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
    if call is None:
        branch = _branch(step.kind == "call", frame.addr, frame.func, None, None, 0)
    else:
        branch = _branch(
            step.kind == "call",
            frame.addr,
            frame.func,
            call.parent_addr,
            call.parent,
            call.parent_off,
        )
    hit.raw_branches.append(branch)
    for f in step.stack:  # a loop, not any(): this runs for every step of every hit
        if f.func in PROBE_HANDLERS:
            return
    hit.branches.append(branch)


#: The same call sites come back hit after hit, poll after poll: each branch is
#: built (and named, which goes by object) once. Branches are frozen: hits share them.
@functools.lru_cache(maxsize=1 << 14)
def _branch(
    call: bool, addr: int, func: str, site_addr: int | None, site: str | None, site_off: int
) -> Branch:
    """The branch of a call into function `func` (at `addr`) or a return from it;
    `site_addr` None: entered unseen, its caller unknown."""
    entry = Location(addr, func, 0)
    if site_addr is None:
        # Entered unseen: an explicit frame whose caller is unknown, or an exception
        # handler the CPU entered (noinstr, so only its callees name it).
        source = EXCEPTION_ENTRY if is_exception_handler(func) else UNSEEN_CALLER
        if call:
            return Branch(source, entry, "unseen")
        return Branch(entry, source, "ret")
    where = Location(site_addr, site, site_off)
    if call:
        return Branch(where, entry, "call")
    # Function tracing does not see the ret instruction: the return is shown
    # from the function (+0x0) back to its call site.
    return Branch(entry, where, "ret")


@functools.lru_cache(maxsize=1024)
def _retval(body: str) -> int | None:
    # kretprobe event body: "(vfs_write+0x0/0x3f0 <- ksys_write+0x6a/0xe0) ret=0x1"
    for part in body.split():
        if part.startswith("ret="):
            value = int(part[4:], 0)
            return value - (1 << 64) if value >= 1 << 63 else value
    return None


def hit_event(target: Target, event: str, record: FunctionRecord | EventRecord) -> bool:
    """Whether `record` is the event that makes a hit of tp/uprobe `target` (`event`:
    the target's event name, as `build_hits` takes it)."""
    if not isinstance(record, EventRecord):
        return False
    return _is_event(record, event) if target.kind == "tp" else record.name == event
