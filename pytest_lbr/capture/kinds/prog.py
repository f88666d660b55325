"""BPF programs (``prog:...``, a program object): hooked, armed and cut.

The LBR tracer hooks a program with fentry/fexit on its function. The graph
backend cannot record a JITed program: a run shows as the calls whose parent (call
site) is inside the program or one of its subprograms (`program_matcher`), cut into
runs by `program_runs`, and its return value comes from the tracer's fexit hook
(the backend attaches those for the targets in `GraphArming.programs`).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Sequence
from typing import ClassVar

from pytest_lbr.capture.call_sites import call_sites
from pytest_lbr.capture.graph.branches import append_step
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
    unseen_frame,
)
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.graph.trampoline import trampoline_frame
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.hooks.state import Attached
from pytest_lbr.capture.implied import flow_of, read_details
from pytest_lbr.capture.kinds.protocol import (
    GraphArming,
    HitCutting,
    Hooking,
    Matcher,
    TargetKind,
)
from pytest_lbr.model import Hit
from pytest_lbr.targets import Target

__all__ = ["PROG", "Program", "program_matcher", "program_runs"]


class Program(TargetKind):
    """A BPF program target."""

    names: ClassVar[tuple[str, ...]] = ("prog",)
    narrows: ClassVar[bool] = True

    def attach(self, hooks: Hooking, index: int, target: Target) -> Attached:
        fd, func, ksym = hooks.resolve_prog(target)
        hooks.attach_prog(index, target, fd, func)
        return Attached(target, [func], "fentry" if hooks.fentry else "fexit", ksym)

    def traced_symbol(self, func: str | None, ksym: str) -> str | None:
        return ksym or None

    def arm_graph(self, arming: GraphArming, index: int, target: Target) -> None:
        from pytest_lbr.programs.find import resolve_program

        with resolve_program(target) as ref:
            details = read_details(ref.fd)  # once: its functions here, and its flow's
            ranges = [(lo, lo + n) for lo, n in details.functions] if details else []
            arming.matchers.append(program_matcher(ref.ksyms, ranges))
            names = ref.ksyms if len(ref.ksyms) == len(ranges) else ref.ksyms[:1]
            arming.starts[index] = [
                (names[k] if k < len(names) else None, lo) for k, (lo, _) in enumerate(ranges)
            ]
            for (name, lo), (_, hi) in zip(arming.starts[index], ranges, strict=True):
                if name is not None:
                    call_sites.learn(name, lo, hi - lo)
            arming.flows[target.spec] = flow_of(
                ref.fd, arming.available(), (ref.id, ref.tag), details
            )
        arming.programs.append(index)

    def graph_hits(self, cut: HitCutting, index: int, target: Target) -> list[Hit]:
        mine = cut.mine
        ends = sorted(r.ts_ns for r in mine.get(index, []))
        mine_starts = cut.starts.get(index, ())
        others = [v for k, v in cut.starts.items() if k != index]
        other_ends = sorted(r.ts_ns for k, rs in mine.items() if k != index for r in rs)
        runs = program_runs(
            target,
            cut.matchers[index],
            cut.tid,
            cut.records,
            ends,
            mine_starts,
            cut.site_of,
            others,
            other_ends,
        )
        if index in cut.exits:
            runs = _with_returns(target, cut.tid, runs, mine.get(index, []))
        return runs


PROG = Program()


def program_matcher(ksyms: Iterable[str], ranges: list[tuple[int, int]]) -> Matcher:
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


def program_runs(
    target: Target,
    in_program: Matcher,
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
            append_step(hit, Step("ret", inner[-1], list(inner)))
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
                append_step(hit, Step("call", frame, list(inner)))
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
                    append_step(hit, Step("call", frame, list(inner)))
        if hit is None:
            depth = innermost(outer, parent.__eq__)
            if depth is not None:
                del outer[depth + 1 :]  # the innermost frame of that name
            elif parent:
                outer.append(parent)
            outer.append(rec.func)
            continue
        inner.append(Frame(rec.func, rec.func_addr, rec))
        append_step(hit, Step("call", inner[-1], list(inner)))
    if hit is not None:
        close()
    return hits


def _callback(frame: Frame, site: tuple[str | None, int, int] | None) -> bool:
    """Whether `frame` was entered from another function of the program than the one
    of its latest call `site`: a BPF callback, which a helper runs."""
    call = frame.call
    return call is not None and site is not None and call.parent_addr - call.parent_off != site[1]
