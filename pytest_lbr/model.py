"""The trace model both backends fill in: locations, branches, hits and traces.

A `Trace` is what `lbr.trace(...)` yields. Its queries (`called`, `functions`,
`has_path`) work the same on hardware LBR records and on the graph backend's
call/return records, because both are expressed as `Branch` objects between
symbolized `Location`s.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.macros import helpers_of

__all__ = [
    "BRANCH_KINDS",
    "CALL_KINDS",
    "FRAME_KINDS",
    "HELPER_FATES",
    "KERNEL_NAME_MAX",
    "UNSEEN_CALLER",
    "EXCEPTION_ENTRY",
    "Branch",
    "HelperCall",
    "InlineFrame",
    "Hit",
    "KnownNames",
    "Location",
    "PathMatch",
    "ProgramCalls",
    "Trace",
    "TraceQueryError",
    "helper_matches",
]

#: Every value `Branch.kind` can take. "unseen" (graph backend only) enters a
#: function the tracer never recorded being called (notrace, e.g. an out-of-line
#: copy of a kernel `inline` function): its caller is unknown, so its source is
#: `UNSEEN_CALLER`, and it is no call edge. "implied" (graph backend only) is a
#: call of a function the function tracer cannot record (`bpf_get_current_task`),
#: proven by the program's code: its call site dominates a recorded call of the
#: same run (`pytest_lbr.capture.implied`). `called()` counts it; golden edges and
#: call trees do not (nothing recorded it).
BRANCH_KINDS = (
    "call",
    "ret",
    "jmp",
    "cond",
    "ind_call",
    "ind_jmp",
    "syscall",
    "unseen",
    "implied",
    "unknown",
)
#: The kinds that enter a function (what `called()` and golden edges count).
CALL_KINDS = ("call", "ind_call")
#: The kinds `Trace.called` counts: calls recorded, and calls proven by the code.
_CALLED_KINDS = (*CALL_KINDS, "implied")
#: The kinds that open a frame of a call tree (a "ret" closes it).
FRAME_KINDS = (*CALL_KINDS, "unseen")
#: The longest name the kernel keeps for a program (BPF_OBJ_NAME_LEN - 1): a
#: longer one is cut ("balancer_ingres" for balancer_ingress_v4).
KERNEL_NAME_MAX = 15
_UNSEEN = "(unseen caller)"
_EXCEPTION = "(exception)"
#: What the verifier made of a helper call the BPF C wrote: still a "call" of
#: the helper's implementation; "rewritten" into a call of a map type's own
#: function; "inlined" (no call left: the verifier or the JIT put the helper's work
#: in its place); "removed" (the verifier removed the code as unreachable, e.g. a
#: branch on a frozen `const volatile`); "tail call"; "unknown" where a call left
#: unmatched cannot be told apart on this kernel (its helper implementations could
#: not be read, or it is newer than the table of inlined helpers).
HELPER_FATES = ("call", "rewritten", "inlined", "removed", "tail call", "unknown")
#: How a trace's text says what became of a call that left no call behind.
_LOST_WORDS = {
    "inlined": "inlined by the verifier",
    "removed": "removed by the verifier as unreachable",
    "unknown": "left no call (inlined or removed: cannot tell on this kernel)",
}


class TraceQueryError(UserError, ValueError):
    """A trace query named something it cannot answer about: a `by` that is no
    program or function of the trace, or a callee that exists nowhere (a typo).
    A query never answers False about a name it does not know: `assert not
    trace.called(...)` with a misspelt name would pass whatever the kernel did."""


class KnownNames(Protocol):
    """What exists beyond a trace's own records, asked only when a query would
    answer False (the tracer's: `pytest_lbr.symbols.known`)."""

    def traced(self) -> list[tuple[str, ...]]:
        """Each traced program: (its name as the C wrote it, the kernel's 15-byte
        name, its functions...), whether or not it ran."""
        ...

    def exists(self, pattern: str, *, kernel_only: bool = False) -> bool:
        """Does `pattern` (glob) name a helper, kfunc, kernel function or a function
        of a loaded BPF program (`kernel_only`: a kernel function)?"""
        ...

    def similar(self, name: str) -> list[str]:
        """Names close to `name`, for the error message."""
        ...


@dataclass(frozen=True)
class HelperCall:
    """One helper call site of a program, and what this kernel runs for it."""

    #: The name the BPF C wrote (bpf_helpers.h): "bpf_map_lookup_elem".
    helper: str
    #: One of HELPER_FATES.
    fate: str
    #: The kernel function the program calls for it ("__htab_map_lookup_elem"),
    #: None when inlined or a tail call.
    function: str | None = None
    #: The callback it was given (bpf_loop, bpf_for_each_map_elem, ...), if any.
    callback: str | None = None


@dataclass(frozen=True)
class ProgramCalls:
    """A loaded program's helper calls as written and as translated by the verifier."""

    #: The program's name as the C wrote it (its main function's BTF name; the
    #: kernel's name where the program has no BTF).
    program: str
    prog_id: int
    #: Its functions: the main function first, then subprograms and callbacks.
    functions: tuple[str, ...]
    #: Every helper call site in instruction order, subprograms included. Only
    #: calls the kernel still makes are known when the object's own
    #: instructions were not (`written` False: loaded outside the `bpf` fixture).
    calls: tuple[HelperCall, ...]
    written: bool = True
    #: Programs seen to tail-call into this one (through their program arrays).
    tail_called_by: tuple[str, ...] = ()
    #: The kernel's name for it: at most 15 bytes (BPF_OBJ_NAME_LEN - 1), an alias
    #: of `program` ("" when the same).
    kernel_name: str = ""

    def inlined(self, helper: str) -> bool:
        """True if a call of `helper` (glob) was inlined by the verifier."""
        return self._fate_of(helper, "inlined")

    def removed(self, helper: str) -> bool:
        """True if a call of `helper` (glob) was removed by the verifier as unreachable."""
        return self._fate_of(helper, "removed")

    def _fate_of(self, helper: str, fate: str) -> bool:
        return any(c.fate == fate and helper_matches(c.helper, helper) for c in self.calls)

    def helper_of(self, function: str | None) -> str | None:
        """The helper (as the C wrote it) that this program's call of kernel
        function `function` stands for, if its calls say so; else None."""
        for c in self.calls:
            if c.function == function and c.fate in ("call", "rewritten") and function:
                return c.helper
        return None

    def lost_calls(self) -> list[str]:
        """What became of the calls that left no call behind, one phrase per fate:
        "bpf_printk removed by the verifier as unreachable"."""
        out = []
        for fate, words in _LOST_WORDS.items():
            helpers = sorted({c.helper for c in self.calls if c.fate == fate})
            if helpers:
                out.append(f"{', '.join(helpers)} {words}")
        return out

    @property
    def names(self) -> tuple[str, ...]:
        """Its name, then the kernel's 15-byte alias where that differs."""
        kernel = self.kernel_name
        return (self.program, kernel) if kernel and kernel != self.program else (self.program,)


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
    #: The BPF helper (as bpf_helpers.h names it) this kernel function implements
    #: for BPF programs: "bpf_get_prandom_u32" at bpf_user_rnd_u32.
    helper: str | None = None
    #: For code of a loaded BPF program: its helper calls as written and as run.
    program: ProgramCalls | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """`symbol+0xoff`, or the bare hex address when the symbol is unknown."""
        if self.symbol is None:
            return f"{self.addr:#x}"
        if self.symbol in (_UNSEEN, _EXCEPTION):
            return self.symbol
        return f"{self.symbol}+{self.offset:#x}"

    @property
    def source(self) -> str | None:
        """`file:line`, or None when no line information is known."""
        if self.file is None:
            return None
        return f"{self.file}:{self.line if self.line is not None else 0}"

    @property
    def label(self) -> str:
        """`name`, with the helper name beside a helper's implementation:
        `bpf_user_rnd_u32+0x0 [bpf_get_prandom_u32]`."""
        if self.helper and self.helper != self.symbol:
            return f"{self.name} [{self.helper}]"
        return self.name

    def matches(self, pattern: str) -> bool:
        """True if the symbol or the helper name matches `pattern` (glob), or
        `pattern` is a libbpf macro that calls this helper (`bpf_printk`)."""
        return (
            _match(self.symbol, pattern)
            or _match(self.helper, pattern)
            or (self.helper is not None and helper_matches(self.helper, pattern))
        )

    def __str__(self) -> str:
        src = self.source
        return f"{self.label} ({src})" if src else self.label

    def __repr__(self) -> str:  # compact: failure messages print many of these
        return f"<Location {self}>"


#: The source of an "unseen" branch: a caller the tracer did not record.
UNSEEN_CALLER = Location(0, _UNSEEN)
#: The source of an "unseen" branch into an exception handler (x86's exc_page_fault):
#: the CPU entered it on a fault, from no call instruction.
EXCEPTION_ENTRY = Location(0, _EXCEPTION)


@dataclass(frozen=True)
class Branch:
    """A taken branch from `src` to `dst`."""

    src: Location
    dst: Location
    kind: str = "unknown"
    mispredicted: bool = False
    cycles: int = 0

    @property
    def tail_callers(self) -> tuple[str, ...]:
        """The programs that can have tail-called into `dst` when this branch
        enters a program's main function unseen (a tail call jumps, it calls
        nothing a tracer sees); else ()."""
        prog = self.dst.program
        if self.kind != "unseen" or prog is None or self.dst.symbol != prog.program:
            return ()
        return prog.tail_called_by

    def __str__(self) -> str:
        callers = self.tail_callers
        if callers:
            return f"{'|'.join(callers)} -> {self.dst} (tail call)"
        if self.kind == "implied":
            return f"{self.src} -> {self.dst} (implied: its call site dominates a recorded call)"
        prog = self.src.program if self.kind == "ret" and self.dst == UNSEEN_CALLER else None
        if prog is not None and self.src.symbol == prog.program and prog.tail_called_by:
            # A tail-called program returns where the program that tail-called was
            # called from: known, not unseen, though its address is not recorded.
            returns_to = "|".join(prog.tail_called_by)
            return f"{self.src} -> the caller of {returns_to} (end of the tail call)"
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
    #: Why the hits carry no branches by design ("" when they record them): the LBR
    #: backend on software perf events (--lbr-pmu=software). Failed branch queries say it.
    no_branches: str = ""
    #: The backend's records as read (graph: the tracefs instance's text), for
    #: finding out why a trace looks the way it does; never compared.
    capture_text: str = field(default="", repr=False, compare=False)
    #: What exists beyond this trace's records, for refusing a query about a name
    #: nothing has (`TraceQueryError`); None for a trace built by hand: then a callee
    #: is checked against the trace's own names only where it has them.
    known: KnownNames | None = field(default=None, repr=False, compare=False)

    def complete_from(self, finished: Trace) -> None:
        """Take what a finished capture recorded (`finished`) into this trace, keeping
        its targets and names as the tracer gave them: the `Trace` a `with
        lbr.trace(...)` block holds is empty inside the block and complete after it."""
        for f in fields(self):
            if f.name not in ("targets", "known"):
                setattr(self, f.name, getattr(finished, f.name))

    # -- queries -------------------------------------------------------------

    def branches(self) -> Iterator[Branch]:
        """All branches of all hits, in order."""
        for hit in self.hits:
            yield from hit.branches

    def calls(self) -> Iterator[Branch]:
        """Branches that are calls (direct or indirect)."""
        return (b for b in self.branches() if b.kind in CALL_KINDS)

    def called(self, callee: str, by: str | None = None) -> bool:
        """True if some call entered `callee` (from `by`, if given). Globs allowed.

        `callee` is a kernel function, a BPF function or program, or a helper as
        the BPF C names it ("bpf_map_lookup_elem"): that matches the function
        this kernel ran for it (`Location.helper`), or a libbpf macro that calls
        helpers ("bpf_printk", "BPF_CORE_READ": `pytest_lbr.macros`). A tail call
        into a program counts as a call of it by the program that tail-called; an
        "implied" call (graph backend: proven by the program's code) counts too.
        `by` is a program or function as the C wrote it (the kernel's 15-byte
        name of a program is an alias). Raises `TraceQueryError` for a `by` that
        names no program or function of the trace (nor a kernel function), and for
        a callee that exists nowhere: False means "not called", never "unknown".
        """
        callers = None if by is None else self._callers(by)
        for b in self.branches():
            if not b.dst.matches(callee):
                continue
            if b.kind in _CALLED_KINDS and (callers is None or _match_any(b.src.symbol, callers)):
                return True
            tail = b.tail_callers
            if tail and (callers is None or any(_match_any(c, callers) for c in tail)):
                return True
        self._check_exists(callee)
        return False

    def programs(self) -> dict[str, ProgramCalls]:
        """The BPF programs whose code this trace went through, by name as the C
        wrote it, with their helper calls as written and as this kernel translated
        them."""
        out: dict[str, ProgramCalls] = {}
        for b in self.branches():
            for loc in (b.src, b.dst):
                if loc.program is not None:
                    out.setdefault(loc.program.program, loc.program)
        return out

    def inlined(self, helper: str, by: str | None = None) -> bool:
        """True if this kernel's verifier inlined a call of `helper` (glob, as the
        BPF C names it: "bpf_loop") in program `by` (any traced program if None).

        Known for programs whose code the trace went through, loaded with the
        `bpf` fixture (their own call sites are compared with the translated
        instructions); `programs()` shows every call site's fate. A call the
        verifier removed as unreachable is not inlined (`removed`). `by` as for
        `called`, naming a program.
        """
        if any(p.inlined(helper) for p in self._programs_by(by)):
            return True
        self._check_exists(helper)
        return False

    def removed(self, helper: str, by: str | None = None) -> bool:
        """True if this kernel's verifier removed a call of `helper` as unreachable
        code in program `by` (any traced program if None): a branch it proved never
        runs, such as one on a `const volatile` the loader froze."""
        if any(p.removed(helper) for p in self._programs_by(by)):
            return True
        self._check_exists(helper)
        return False

    # -- names a query may use ---------------------------------------------------

    def _program_names(self, targets: bool = True) -> list[tuple[str, ...]]:
        """(name, kernel name, functions...) of each program gone through, and
        (`targets`) each program traced, whether or not it ran."""
        out = [(p.program, p.kernel_name, *p.functions) for p in self.programs().values()]
        if targets and self.known is not None:
            out += self.known.traced()
        for spec in self.targets:
            if spec.startswith("prog:name:"):
                out.append((spec.removeprefix("prog:name:"), ""))
        return out

    def _names_held(self) -> set[str]:
        """Every function name this trace holds, and the kernel functions it targets."""
        names = {loc.symbol for b in self.branches() for loc in (b.src, b.dst) if loc.symbol}
        names.update(t.split(":", 1)[1] for t in self.targets if t.startswith("kfunc:"))
        return names

    def _callers(self, by: str) -> tuple[str, ...]:
        """The names a caller `by` may have in this trace: `by`; the kernel's
        15-byte name of a longer one (what a program without BTF is called); and
        the full name of a traced program whose 15-byte name `by` is. Raises
        `TraceQueryError` when none names a program or function of the trace, or
        a kernel function, and when `by` is the 15-byte name of two programs."""
        try:
            # What the trace holds answers most: the targets are read only if not.
            return self._callers_among(by, self._program_names(targets=False))
        except TraceQueryError:
            if self.known is None:
                raise
        return self._callers_among(by, self._program_names())

    def _callers_among(self, by: str, progs: list[tuple[str, ...]]) -> tuple[str, ...]:
        names = {by}
        if not _is_glob(by) and len(by.encode()) > KERNEL_NAME_MAX:
            stump = by.encode()[:KERNEL_NAME_MAX].decode(errors="ignore")
            # Only where no program of that stump has its full name known (BTF):
            # else "getppid_counter_typo" would name getppid_counter_with_long_name.
            if not any(p[1] == stump and p[0] != stump for p in progs):
                names.add(stump)
        if not any(_match(p[0], by) for p in progs):
            aliased = sorted({p[0] for p in progs if p[1] and _match(p[1], by)})
            if len(aliased) > 1 and not _is_glob(by):
                raise TraceQueryError(
                    f"by={by!r} is the kernel's 15-byte name of {len(aliased)} traced "
                    f"programs ({', '.join(aliased)}): name one as the C wrote it"
                )
            names.update(aliased)
        if (
            any(_match_any(n, names) for p in progs for n in p)
            or any(_match_any(s, names) for s in self._names_held())
            or (self.known is not None and self.known.exists(by, kernel_only=True))
        ):
            return tuple(sorted(names))
        raise TraceQueryError(
            f"by={by!r} names no program or function of this trace "
            f"(nor a kernel function){self._nearest(by, progs)}"
        )

    def _programs_by(self, by: str | None) -> list[ProgramCalls]:
        """The programs of this trace `by` names (all if None); raises
        `TraceQueryError` where `by` names no traced program."""
        progs = list(self.programs().values())
        if by is None:
            return progs
        names = self._callers(by)
        found = [p for p in progs if any(_match_any(n, names) for n in p.names)]
        if found:
            return found
        traced = self._program_names()  # a traced program that never ran: False, not an error
        if not any(_match_any(n, names) for p in traced for n in p[:2]):
            raise TraceQueryError(
                f"by={by!r} names no BPF program of this trace{self._nearest(by, traced)}"
            )
        return found

    def _check_exists(self, name: str) -> None:
        """Raise `TraceQueryError` unless `name` (glob) names something that exists."""
        # A location's symbol or helper name (`Location.matches`), a kernel function
        # target, a libbpf macro.
        if helpers_of(name) or any(_match(s, name) for s in self._names_held()):
            return
        if any(loc.matches(name) for b in self.branches() for loc in (b.src, b.dst)):
            return
        progs = self._program_names()
        if any(_match(n, name) for p in progs for n in p):
            return
        for prog in self.programs().values():
            if any(helper_matches(c.helper, name) for c in prog.calls):
                return
        if self.known is None or self.known.exists(name):
            return
        raise TraceQueryError(
            f"{name!r} names no helper, kfunc, kernel function or function of a loaded "
            f"BPF program{self._nearest(name, progs)}"
        )

    def _nearest(self, name: str, progs: list[tuple[str, ...]]) -> str:
        """ "; nearest: a, b" for an error message ("" when nothing is close)."""
        pool = {n for p in progs for n in p if n} | self._names_held()
        if self.known is not None:
            pool.update(self.known.similar(name))
        close = difflib.get_close_matches(name, sorted(pool), n=4, cutoff=0.6)
        return f"; nearest: {', '.join(close)}" if close else ""

    def functions(self) -> list[str]:
        """Functions in execution order across all hits, consecutive repeats collapsed.

        Kernel names: a helper appears as the function this kernel ran for it
        (`has_path` matches the helper name too).
        """
        return _collapse(name for hit in self.hits for name in hit.functions())

    def _steps(self) -> list[Location]:
        """One Location per entry of `functions()`, for matching helper names."""
        out: list[Location] = []
        for hit in self.hits:
            last: str | None = None
            for loc in _locations(hit.branches):
                if loc.symbol != last:
                    out.append(loc)
                    last = loc.symbol
        return [loc for i, loc in enumerate(out) if i == 0 or out[i - 1].symbol != loc.symbol]

    def has_path(self, *functions: str) -> bool:
        """True if `functions` appear in this order in `functions()` (gaps allowed).
        Raises `TraceQueryError` for a function of the path that exists nowhere."""
        match = self.closest_path(*functions)
        if match.complete:
            return True
        for name in functions[len(match.matched) :]:
            self._check_exists(name)
        return False

    def closest_path(self, *functions: str) -> PathMatch:
        """The longest prefix of `functions` found in order: explains a failed has_path."""
        seen = self._steps()
        matched: list[str] = []
        pos = 0
        for want in functions:
            while pos < len(seen) and not seen[pos].matches(want):
                pos += 1
            if pos == len(seen):
                break
            matched.append(seen[pos].symbol or "")
            pos += 1
        return PathMatch(tuple(functions), tuple(matched))

    def callers_of(self, callee: str) -> list[str]:
        """Distinct functions seen calling `callee` (glob), for failure messages."""
        out: list[str] = []
        for b in self.calls():
            if b.dst.matches(callee) and b.src.symbol and b.src.symbol not in out:
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
    for name, prog in trace.programs().items():
        lost = prog.lost_calls()
        if lost:
            out.append(f"# program {name}: {'; '.join(lost)}")
    for hit in trace.hits:
        out.append(format_hit_header(hit))
        if hit.branches:
            out.append(format_branches(hit.branches))
    return "\n".join(out)


def helper_matches(helper: str, pattern: str) -> bool:
    """True if a helper's name (as bpf_helpers.h spells it) matches `pattern`: a
    glob, or a libbpf macro that expands into a call of it ("bpf_printk")."""
    return _match(helper, pattern) or helper in helpers_of(pattern)


def _match(name: str | None, pattern: str) -> bool:
    if name is None:
        return False
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def _match_any(name: str | None, patterns: Iterable[str]) -> bool:
    return any(_match(name, p) for p in patterns)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _locations(branches: Iterable[Branch]) -> Iterator[Location]:
    for b in branches:
        for loc in (b.src, b.dst):
            if loc.symbol and loc not in (UNSEEN_CALLER, EXCEPTION_ENTRY):
                yield loc


def _symbols(branches: Iterable[Branch]) -> Iterator[str]:
    return (loc.symbol or "" for loc in _locations(branches))


def _collapse(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out
