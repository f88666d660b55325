"""The trace model both backends fill in: locations, branches, hits and traces.

A `Trace` is what `lbr.trace(...)` yields. Its queries (`called`, `functions`,
`has_path`) work the same on hardware LBR records and on the graph backend's
call/return records, because both are expressed as `Branch` objects between
symbolized `Location`s.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BRANCH_KINDS",
    "CALL_KINDS",
    "FRAME_KINDS",
    "UNSEEN_CALLER",
    "Branch",
    "InlineFrame",
    "Hit",
    "Location",
    "PathMatch",
    "Trace",
]

#: Every value `Branch.kind` can take. "unseen" (graph backend only) enters a
#: function the tracer never recorded being called (notrace, e.g. an out-of-line
#: copy of a kernel `inline` function): its caller is unknown, so its source is
#: `UNSEEN_CALLER`, and it is no call edge.
BRANCH_KINDS = (
    "call",
    "ret",
    "jmp",
    "cond",
    "ind_call",
    "ind_jmp",
    "syscall",
    "unseen",
    "unknown",
)
#: The kinds that enter a function (what `called()` and golden edges count).
CALL_KINDS = ("call", "ind_call")
#: The kinds that open a frame of a call tree (a "ret" closes it).
FRAME_KINDS = (*CALL_KINDS, "unseen")
_UNSEEN = "(unseen caller)"


@dataclass(frozen=True)
class InlineFrame:
    """A function inlined at a location: shown on a continuation line."""

    function: str
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Location:
    """One code address with the names a person reads it by."""

    addr: int
    symbol: str | None = None
    offset: int = 0
    module: str | None = None
    file: str | None = None
    line: int | None = None
    #: Inlined callers at this address, innermost first.
    inlined: tuple[InlineFrame, ...] = ()

    @property
    def name(self) -> str:
        """`symbol+0xoff`, or the bare hex address when the symbol is unknown."""
        if self.symbol is None:
            return f"{self.addr:#x}"
        if self.symbol == _UNSEEN:
            return _UNSEEN
        return f"{self.symbol}+{self.offset:#x}"

    @property
    def source(self) -> str | None:
        """`file:line`, or None when no line information is known."""
        if self.file is None:
            return None
        return f"{self.file}:{self.line if self.line is not None else 0}"

    def __str__(self) -> str:
        src = self.source
        return f"{self.name} ({src})" if src else self.name

    def __repr__(self) -> str:  # compact: failure messages print many of these
        return f"<Location {self}>"


#: The source of an "unseen" branch: a caller the tracer did not record.
UNSEEN_CALLER = Location(0, _UNSEEN)


@dataclass(frozen=True)
class Branch:
    """A taken branch from `src` to `dst`."""

    src: Location
    dst: Location
    kind: str = "unknown"
    mispredicted: bool = False
    cycles: int = 0

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}"

    def __repr__(self) -> str:
        return f"<Branch {self.kind}: {self}>"


@dataclass
class Hit:
    """One time a target fired, with the branches recorded up to that moment."""

    target: str
    cpu: int = 0
    pid: int = 0
    tid: int = 0
    retval: int | None = None
    #: Branches oldest first, with the tracer's own records trimmed away.
    branches: list[Branch] = field(default_factory=list)
    #: Everything the kernel delivered, including the tracer's own records.
    raw_branches: list[Branch] = field(default_factory=list)
    timestamp_ns: int = 0
    #: The command name of the task it ran in (or interrupted), "" where unknown.
    comm: str = ""
    #: True when it ran in interrupt context (hardirq, softirq: NAPI, XDP on
    #: receive, timers), on top of whatever task `pid`/`comm` name.
    in_interrupt: bool = False

    def functions(self) -> list[str]:
        """Function names in execution order, consecutive repeats collapsed."""
        return _collapse(_symbols(self.branches))


@dataclass(frozen=True)
class PathMatch:
    """How much of a wanted path a trace contains: used in failure messages."""

    wanted: tuple[str, ...]
    matched: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return len(self.matched) == len(self.wanted)

    @property
    def missing(self) -> str | None:
        """The first wanted function that was not found in order."""
        return None if self.complete else self.wanted[len(self.matched)]


@dataclass
class Trace:
    """Everything captured while a `lbr.trace(...)` block was armed."""

    targets: list[str] = field(default_factory=list)
    backend: str = "graph"
    hits: list[Hit] = field(default_factory=list)
    #: Records the kernel could not deliver (ring buffer full, perf loss).
    lost: int = 0
    kernel_release: str = ""
    #: The machine's architecture as `uname -m` names it ("x86_64", "aarch64"): the
    #: backends set it from `pytest_lbr.kernel.machine`; a Trace built by hand is
    #: of the machine it is built on.
    arch: str = field(default_factory=lambda: os.uname().machine)
    #: Why the trace may be incomplete, beyond `lost` (e.g. "LBR: snapshot -ENOENT").
    notes: list[str] = field(default_factory=list)
    #: The backend's records as read (graph: the tracefs instance's text), for
    #: finding out why a trace looks the way it does; never compared.
    capture_text: str = field(default="", repr=False, compare=False)

    # -- queries -------------------------------------------------------------

    def branches(self) -> Iterator[Branch]:
        """All branches of all hits, in order."""
        for hit in self.hits:
            yield from hit.branches

    def calls(self) -> Iterator[Branch]:
        """Branches that are calls (direct or indirect)."""
        return (b for b in self.branches() if b.kind in CALL_KINDS)

    def called(self, callee: str, by: str | None = None) -> bool:
        """True if some call entered `callee` (from `by`, if given). Globs allowed."""
        return any(
            _match(b.dst.symbol, callee) and (by is None or _match(b.src.symbol, by))
            for b in self.calls()
        )

    def functions(self) -> list[str]:
        """Functions in execution order across all hits, consecutive repeats collapsed."""
        return _collapse(name for hit in self.hits for name in hit.functions())

    def has_path(self, *functions: str) -> bool:
        """True if `functions` appear in this order in `functions()` (gaps allowed)."""
        return self.closest_path(*functions).complete

    def closest_path(self, *functions: str) -> PathMatch:
        """The longest prefix of `functions` found in order: explains a failed has_path."""
        seen = self.functions()
        matched: list[str] = []
        pos = 0
        for want in functions:
            while pos < len(seen) and not _match(seen[pos], want):
                pos += 1
            if pos == len(seen):
                break
            matched.append(seen[pos])
            pos += 1
        return PathMatch(tuple(functions), tuple(matched))

    def callers_of(self, callee: str) -> list[str]:
        """Distinct functions seen calling `callee` (glob), for failure messages."""
        out: list[str] = []
        for b in self.calls():
            if _match(b.dst.symbol, callee) and b.src.symbol and b.src.symbol not in out:
                out.append(b.src.symbol)
        return out

    def __len__(self) -> int:
        return sum(len(h.branches) for h in self.hits)

    def __str__(self) -> str:
        return format_trace(self)


def format_branches(branches: Sequence[Branch], *, first_index: int | None = None) -> str:
    """Branch lines in the retsnoop/bpflbr format, oldest first.

    The first line carries `[#N]` with N the index of the oldest record (as in
    bpflbr, where records count down to 0 at the newest); inlined frames follow
    a line on indented continuation lines.
    """
    lines: list[str] = []
    top = len(branches) - 1 if first_index is None else first_index
    for i, b in enumerate(branches):
        prefix = f"[#{top:02d}] " if i == 0 else ""
        lines.append(f"{prefix}{b}")
        for loc in (b.src, b.dst):
            for frame in loc.inlined:
                where = f" ({frame.file}:{frame.line or 0})" if frame.file else ""
                lines.append(f"    . inlined {frame.function}{where}")
    return "\n".join(lines)


def format_hit_header(hit: Hit) -> str:
    """The line that introduces a hit, as bpflbr prints it."""
    ret = "" if hit.retval is None else f" retval={hit.retval}"
    comm = f" comm={hit.comm}" if hit.comm else ""
    irq = " in_interrupt" if hit.in_interrupt else ""
    return (
        f"Hit at {hit.target}: cpu={hit.cpu} pid={hit.pid} tid={hit.tid}{comm}{irq}{ret} "
        f"branches={len(hit.branches)}"
    )


def format_trace(trace: Trace) -> str:
    """The whole trace as text: a header line per hit, then its branches."""
    out = [
        f"# backend={trace.backend} kernel={trace.kernel_release or '?'} "
        f"hits={len(trace.hits)} lost={trace.lost}"
    ]
    out.extend(f"# note: {n}" for n in trace.notes)
    for hit in trace.hits:
        out.append(format_hit_header(hit))
        if hit.branches:
            out.append(format_branches(hit.branches))
    return "\n".join(out)


def _match(name: str | None, pattern: str) -> bool:
    if name is None:
        return False
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def _symbols(branches: Iterable[Branch]) -> Iterator[str]:
    for b in branches:
        for loc in (b.src, b.dst):
            if loc.symbol and loc != UNSEEN_CALLER:
                yield loc.symbol


def _collapse(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out
