"""The records a trace is made of: locations, branches, hits, and each program's
helper calls as written and as run; the names they match.

Both backends fill these in, so a query works the same on hardware LBR records and on
the graph backend's call/return records.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pytest_lbr.macros import helpers_of

__all__ = [
    "BRANCH_KINDS",
    "CALL_KINDS",
    "CALLED_KINDS",
    "FRAME_KINDS",
    "HELPER_FATES",
    "KERNEL_NAME_MAX",
    "UNSEEN_CALLER",
    "EXCEPTION_ENTRY",
    "Branch",
    "HelperCall",
    "InlineFrame",
    "Hit",
    "Location",
    "ProgramCalls",
    "helper_matches",
]

#: Every value `Branch.kind` can take. "unseen" (graph backend only) enters a
#: function the tracer never recorded being called (notrace, e.g. an out-of-line
#: copy of a kernel `inline` function): its caller is unknown, so its source is
#: `UNSEEN_CALLER`, and it is no call edge. "implied" (graph backend only) is a
#: call of a function the function tracer cannot record (`bpf_get_current_task`),
#: proven by the program's code: its call site dominates a recorded call of the
#: same run (`pytest_lbr.capture.implied`). `called()` counts it, and the text's
#: call trees show it as such; golden edges and the report's diagram do not
#: (nothing recorded it).
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
CALLED_KINDS = (*CALL_KINDS, "implied")
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
        return self.has_fate(helper, "inlined")

    def removed(self, helper: str) -> bool:
        """True if a call of `helper` (glob) was removed by the verifier as unreachable."""
        return self.has_fate(helper, "removed")

    def has_fate(self, helper: str, fate: str) -> bool:
        """True if a call of `helper` (glob) met `fate` (`HelperCall.fate`). False
        means "none did" only where `written`."""
        return any(c.fate == fate and helper_matches(c.helper, helper) for c in self.calls)

    def why_fates_unknown(self, helper: str) -> str:
        """Why `has_fate(helper, ...)` False would not mean "no call of it met that
        fate" ("" when it does): the calls as written are not known, or one of its
        calls left no call and this kernel's facts cannot tell inlined from removed."""
        if not self.written:
            return (
                f"{self.program} was loaded outside the bpf fixture (or by a BpfLoader "
                "whose book the tracer was not given: Tracer(written=loader.written)): "
                "its calls as the C wrote them are not known (load its object with "
                "bpf.load(...))"
            )
        if any(c.fate == "unknown" and helper_matches(c.helper, helper) for c in self.calls):
            return (
                f"a call of it in {self.program} left no call and this kernel's facts "
                "cannot tell inlined from removed (pytest-lbr doctor says why)"
            )
        return ""

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
            match_name(self.symbol, pattern)
            or match_name(self.helper, pattern)
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
        return collapse_repeats(symbols_in(self.branches))


def helper_matches(helper: str, pattern: str) -> bool:
    """True if a helper's name (as bpf_helpers.h spells it) matches `pattern`: a
    glob, or a libbpf macro that expands into a call of it ("bpf_printk")."""
    return match_name(helper, pattern) or helper in helpers_of(pattern)


def match_name(name: str | None, pattern: str) -> bool:
    if name is None:
        return False
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def match_any(name: str | None, patterns: Iterable[str]) -> bool:
    return any(match_name(name, p) for p in patterns)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def locations_in(branches: Iterable[Branch]) -> Iterator[Location]:
    for b in branches:
        for loc in (b.src, b.dst):
            if loc.symbol and loc not in (UNSEEN_CALLER, EXCEPTION_ENTRY):
                yield loc


def symbols_in(branches: Iterable[Branch]) -> Iterator[str]:
    return (loc.symbol or "" for loc in locations_in(branches))


def collapse_repeats(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out
