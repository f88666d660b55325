"""One thread's function records nested into calls and returns, with a stack.

The function tracer records entries only (`pytest_lbr.capture.graph.text`):
`reconstruct` turns the records of one thread into call/return steps, and
`Mentions` says which frames are known to be still running.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.noise import EXCEPTION_HANDLERS

__all__ = [
    "SiteFinder",
    "called_by_program",
    "calling_frame",
    "is_exception_handler",
    "unseen_frame",
    "BPF_SYMBOL_RE",
    "Frame",
    "Mentions",
    "Step",
    "innermost",
    "innermost_call",
    "reconstruct",
]

T = TypeVar("T")

#: kallsyms names of JITed BPF functions: bpf_prog_<tag>[_<name>].
BPF_SYMBOL_RE = re.compile(r"^bpf_prog_[0-9a-f]{16}(?:_|$)")


@dataclass(slots=True)
class Frame:
    """One function on the reconstructed stack."""

    func: str
    addr: int
    #: The call site this frame returns to (None: entered unseen, e.g. a BPF
    #: program the function tracer cannot record, or a frame older than the trace).
    call: FunctionRecord | None = None
    #: The return address of this frame's latest call seen so far (0: none):
    #: where its code was when it called next.
    last_site: int = 0


@dataclass(slots=True)
class Step:
    """A call into `frame`, a return from it, or an event line.

    `stack` is the stack after a call, before a return, or at an event.
    """

    kind: str  # "call", "ret" or "event"
    frame: Frame | None
    stack: list[Frame] = field(default_factory=list)
    record: FunctionRecord | EventRecord | None = None


def is_exception_handler(func: str) -> bool:
    """Whether `func` is an exception handler the CPU enters (no call made it)."""
    return EXCEPTION_HANDLERS.match(func) is not None


class SiteFinder(Protocol):
    """Where a function's live code calls another (`pytest_lbr.capture.call_sites`)."""

    def __call__(
        self, caller: str | None, caller_start: int, callee_addr: int, after: int = 0
    ) -> tuple[str, int, int] | None:
        """Where function (name or None, start) calls `callee_addr`, at or after a
        return address: (its name, its start, the call's return address), or None
        where its code holds no such call."""

    def through(
        self, caller: str | None, caller_start: int, callee_addr: int, after: int = 0
    ) -> tuple[tuple[str, int, int], tuple[str, int, int]] | None:
        """Where the caller calls a function whose code calls `callee_addr`: that
        call, then the middle function's call (each as `__call__` answers)."""


def _called(rec: FunctionRecord, func: str, addr: int, site: tuple[str, int, int]) -> Frame:
    """The frame of `func`, unrecorded, entered from call site `site` at `rec`'s time."""
    name, caller_start, ret = site
    call = FunctionRecord(
        rec.tid, rec.cpu, rec.ts_ns, rec.in_irq, func, addr,
        name, ret - caller_start, ret, rec.tgid, rec.comm,
    )  # fmt: skip
    return Frame(func, addr, call)


def unseen_frame(
    rec: FunctionRecord, caller: tuple[str | None, int, int] | None, site_of: SiteFinder | None
) -> Frame:
    """The frame of `rec`'s parent, entered without a record of its own.

    `caller`: (name, start, latest call site) of the frame running when it was
    entered. Where the caller's code calls it (`site_of`), the frame gets that
    call as its call site; else its caller stays unknown.
    """
    start = rec.parent_addr - rec.parent_off
    assert rec.parent is not None
    site = None if caller is None or site_of is None else site_of(*caller[:2], start, caller[2])
    if site is None:
        return Frame(rec.parent, start)
    return _called(rec, rec.parent, start, site)


def calling_frame(
    rec: FunctionRecord, stack: Sequence[Frame], upto: int, site_of: SiteFinder | None
) -> tuple[int | None, list[Frame]]:
    """(depth of the caller on `stack`, the frames it entered: `rec`'s unrecorded
    parent, after an unrecorded function between them where there is one).

    The caller is the innermost frame at or below `upto` whose code calls the
    parent: a frame whose code holds no such call did not make it. Where no
    frame's does, it is frame `upto` if its code calls a function that calls the
    parent: `preempt_schedule_common` (notrace) between `__cond_resched` and
    `__schedule` (6.1 guest). Only that frame is searched so: the search reads
    every function it calls, and over a whole stack (an exec's) that is the code
    of every function on it. None: neither is found, so its caller is unknown.
    """
    for depth in range(upto, -1, -1):
        f = stack[depth]
        frame = unseen_frame(rec, (f.func, f.addr, f.last_site), site_of)
        if frame.call is not None:
            f.last_site = frame.call.parent_addr
            return depth, [frame]
    start = rec.parent_addr - rec.parent_off
    assert rec.parent is not None
    f = stack[upto]
    found = None if site_of is None else site_of.through(f.func, f.addr, start, f.last_site)
    if found is not None:
        outer, inner = found
        f.last_site = outer[2]
        middle = _called(rec, inner[0], inner[1], outer)
        middle.last_site = inner[2]
        return upto, [middle, _called(rec, rec.parent, start, inner)]
    return None, [unseen_frame(rec, None, None)]


def called_by_program(
    rec: FunctionRecord,
    site: tuple[str | None, int, int] | None,
    starts: Sequence[tuple[str | None, int]],
    site_of: SiteFinder | None,
) -> Frame:
    """The frame of `rec`'s parent, an unrecorded function the program called: from
    its function of the latest call `site`, or (none yet in this run, or that function
    does not call it) from whichever of its functions (`starts`: kallsyms name, or None,
    and address) calls it: a callback a helper runs, such as bpf_find_vma's."""
    if site is not None:
        frame = unseen_frame(rec, site, site_of)
        if frame.call is not None:
            return frame
    frame = unseen_frame(rec, None, None)
    for name, start in starts:
        if site is not None and start == site[1]:
            continue  # asked above
        # The name, where known, makes a kallsyms read before the program was
        # loaded (another program at the same address once) read anew.
        frame = unseen_frame(rec, (name, start, 0), site_of)
        if frame.call is not None:
            break
    return frame


def reconstruct(
    records: Iterable[FunctionRecord | EventRecord],
    returns: dict[str, str] | None = None,
    mentions: Mentions | None = None,
    site_of: SiteFinder | None = None,
) -> Iterator[Step]:
    """Nest one thread's records into calls and returns.

    Each function record is "callee <- parent+off": pop frames until the top is
    the parent, then push the callee. A parent nowhere on the stack was entered
    without a record (a JITed BPF program, a notrace function such as the
    out-of-line copy of a kernel `inline` function, the trace's start), so it
    is pushed as an unseen frame (no call site). Who called it is unknown: it
    goes under a BPF frame if it is BPF code, else under the innermost frame
    known to be still running (`Mentions.running`), never under a frame that
    may have returned (the function tracer records no returns). That frame is
    its caller where the caller's code calls it (`site_of`, `unseen_frame`).
    An event named in `returns` (a kretprobe event -> its function) is a real
    return: the innermost frame of that function and all above it are popped.
    Frames still open at the end are returned from, innermost first.
    `mentions`: the records' `Mentions`, when the caller wants to ask it afterwards
    (`looked_past_end`).
    """
    returns = returns or {}
    records = list(records)
    if mentions is None:
        mentions = Mentions(records, returns)
    stack: list[Frame] = []

    def pop_to(depth: int) -> Iterator[Step]:
        while len(stack) > depth:
            frame = stack.pop()
            yield Step("ret", frame, stack + [frame])

    for index, rec in enumerate(records):
        if isinstance(rec, EventRecord):
            # The event first, while the returning frame is still on the stack.
            yield Step("event", None, list(stack), rec)
            func = returns.get(rec.name)
            depth = innermost_call(stack, func) if func else None
            if depth is not None:
                yield from pop_to(depth)
            continue
        if rec.parent is not None:
            depth = innermost_call(stack, rec.parent)
            if depth is None:
                # A BPF function is called from BPF code: whatever the
                # innermost BPF frame had called has returned.
                bpf = (
                    innermost(stack, lambda f: BPF_SYMBOL_RE.match(f.func))
                    if BPF_SYMBOL_RE.match(rec.parent)
                    else None
                )
                # Whose code calls it, from the top: the tracer records no returns,
                # so a frame it thinks returned (entered again later) may be the one.
                caller, entered = (
                    calling_frame(rec, stack, len(stack) - 1 if bpf is None else bpf, site_of)
                    if stack
                    else (None, [unseen_frame(rec, None, None)])
                )
                if caller is None and is_exception_handler(rec.parent):
                    caller = len(stack) - 1 if stack else None  # it faulted where it ran
                elif caller is None and bpf is None:
                    caller = mentions.innermost_running(stack, index)
                elif caller is None:
                    caller = bpf
                yield from pop_to(0 if caller is None else caller + 1)
                for unseen in entered:
                    stack.append(unseen)
                    yield Step("call", unseen, list(stack))
            else:
                yield from pop_to(depth + 1)
            stack[-1].last_site = rec.parent_addr
        frame = Frame(rec.func, rec.func_addr, rec)
        stack.append(frame)
        yield Step("call", frame, list(stack), rec)
    yield from pop_to(0)


class Mentions:
    """Where one thread's records name each function: entered, or still running.

    The function tracer records entries only, so whether a frame has returned
    is known only from later records: a function named as a record's parent
    (or by its kretprobe's return event) is still running then, unless a record
    entering it again comes first.
    """

    def __init__(
        self, records: Sequence[FunctionRecord | EventRecord], returns: dict[str, str]
    ) -> None:
        #: function -> (record indexes, whether that record shows it running)
        self._at: dict[str, tuple[list[int], list[bool]]] = {}
        #: Some answer came from no record naming the function after the index
        #: asked: records after these could change it (and so how they nest).
        self.looked_past_end = False
        at = self._at

        def add(func: str, index: int, running: bool) -> None:
            seen = at.get(func)
            if seen is None:
                at[func] = ([index], [running])
            elif seen[0][-1] != index:
                seen[0].append(index)
                seen[1].append(running)

        for i, rec in enumerate(records):
            if isinstance(rec, EventRecord):
                if rec.name in returns:
                    add(returns[rec.name], i, True)
                continue
            if rec.parent is not None:
                add(rec.parent, i, True)  # first: "f <- f" is f still running
            add(rec.func, i, False)

    def running(self, func: str, index: int) -> bool:
        """Whether the first record after `index` that names `func` shows it still running."""
        at = self._at.get(func)
        k = bisect.bisect_right(at[0], index) if at is not None else 0
        if at is None or k == len(at[0]):
            self.looked_past_end = True
            return False
        return at[1][k]

    def innermost_running(self, stack: Sequence[Frame], index: int) -> int | None:
        """Index of the innermost frame of `stack` known to be running after record `index`."""
        return innermost(stack, lambda f: self.running(f.func, index))


def innermost(stack: Sequence[T], found: Callable[[T], object]) -> int | None:
    """Index of the innermost (last) item of a call stack for which `found` holds."""
    for i in range(len(stack) - 1, -1, -1):
        if found(stack[i]):
            return i
    return None


def innermost_call(stack: Sequence[Frame], func: str) -> int | None:
    """Index of the innermost frame of `func` on a call stack."""
    for i in range(len(stack) - 1, -1, -1):  # `innermost`, without a call per frame
        if stack[i].func == func:
            return i
    return None
