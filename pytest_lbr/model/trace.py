"""A trace and its queries: `called`, `inlined`, `removed`, `functions`, `has_path`.

A query never answers False about a name it does not know (`TraceQueryError`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.macros import helpers_of
from pytest_lbr.model.records import (
    CALL_KINDS,
    CALLED_KINDS,
    KERNEL_NAME_MAX,
    Branch,
    Hit,
    Location,
    ProgramCalls,
    collapse_repeats,
    helper_matches,
    is_glob,
    locations_in,
    match_any,
    match_name,
)
from pytest_lbr.model.text import TREE_DEPTH, edge_list, tree_text

__all__ = ["KnownNames", "PathMatch", "Trace", "TraceQueryError"]


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

    def calls(self) -> list[ProgramCalls]:
        """Each traced program's helper calls as its own tables give them, whether
        or not the trace went through its code (what `inlined` and `removed` ask of a
        program that did not run, or of a trace without branches)."""
        ...


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
            if b.kind in CALLED_KINDS and (callers is None or match_any(b.src.symbol, callers)):
                return True
            tail = b.tail_callers
            if tail and (callers is None or any(match_any(c, callers) for c in tail)):
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

        A fact of the loaded program, not of a run: known for programs loaded with
        the `bpf` fixture (their own call sites are compared with the translated
        instructions), whether or not the trace went through their code;
        `programs()` shows every call site's fate. A call the verifier removed as
        unreachable is not inlined (`removed`). `by` as for `called`, naming a
        program. Raises `TraceQueryError` where the answer would be False but cannot
        be told: a program asked about was loaded elsewhere (its calls as written
        are not known), or a call of `helper` left no call on a kernel whose facts
        cannot tell inlined from removed.
        """
        return self._fate(helper, "inlined", by)

    def removed(self, helper: str, by: str | None = None) -> bool:
        """True if this kernel's verifier removed a call of `helper` as unreachable
        code in program `by` (any traced program if None): a branch it proved never
        runs, such as one on a `const volatile` the loader froze. Known and refused
        as `inlined` is."""
        return self._fate(helper, "removed", by)

    def _fate(self, helper: str, fate: str, by: str | None) -> bool:
        """Whether a call of `helper` in the programs `by` names met `fate`: from the
        programs the trace went through, then (only to answer False) from every
        traced program's own tables."""
        progs = self._programs_by(by)
        if any(p.has_fate(helper, fate) for p in progs):
            return True
        if self.known is not None:
            seen = {p.prog_id for p in progs}
            names = None if by is None else self._callers(by)
            for p in self.known.calls():
                if p.prog_id in seen or (names is not None and not _names_one(p, names)):
                    continue
                if p.has_fate(helper, fate):
                    return True
                progs.append(p)
        self._check_exists(helper)
        why = [w for w in dict.fromkeys(p.why_fates_unknown(helper) for p in progs) if w]
        if why:
            raise TraceQueryError(f"cannot tell whether {helper!r} was {fate}: {'; '.join(why)}")
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
        if not is_glob(by) and len(by.encode()) > KERNEL_NAME_MAX:
            stump = by.encode()[:KERNEL_NAME_MAX].decode(errors="ignore")
            # Only where no program of that stump has its full name known (BTF):
            # else "getppid_counter_typo" would name getppid_counter_with_long_name.
            if not any(p[1] == stump and p[0] != stump for p in progs):
                names.add(stump)
        if not any(match_name(p[0], by) for p in progs):
            aliased = sorted({p[0] for p in progs if p[1] and match_name(p[1], by)})
            if len(aliased) > 1 and not is_glob(by):
                raise TraceQueryError(
                    f"by={by!r} is the kernel's 15-byte name of {len(aliased)} traced "
                    f"programs ({', '.join(aliased)}): name one as the C wrote it"
                )
            names.update(aliased)
        if (
            any(match_any(n, names) for p in progs for n in p)
            or any(match_any(s, names) for s in self._names_held())
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
        found = [p for p in progs if _names_one(p, names)]
        if found:
            return found
        traced = self._program_names()  # a traced program that never ran: False, not an error
        if not any(match_any(n, names) for p in traced for n in p[:2]):
            raise TraceQueryError(
                f"by={by!r} names no BPF program of this trace{self._nearest(by, traced)}"
            )
        return found

    def _check_exists(self, name: str) -> None:
        """Raise `TraceQueryError` unless `name` (glob) names something that exists."""
        # A location's symbol or helper name (`Location.matches`), a kernel function
        # target, a libbpf macro.
        if helpers_of(name) or any(match_name(s, name) for s in self._names_held()):
            return
        if any(loc.matches(name) for b in self.branches() for loc in (b.src, b.dst)):
            return
        progs = self._program_names()
        if any(match_name(n, name) for p in progs for n in p):
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
        return collapse_repeats(name for hit in self.hits for name in hit.functions())

    def _steps(self) -> list[Location]:
        """One Location per entry of `functions()`, for matching helper names."""
        out: list[Location] = []
        for hit in self.hits:
            last: str | None = None
            for loc in locations_in(hit.branches):
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

    def tree(self, *, depth: int = TREE_DEPTH, color: bool = False) -> str:
        """The trace as call trees, one per hit (what `str(trace)` is), drawn `depth`
        calls deep; `color`: ANSI colour for a terminal."""
        return tree_text(self, depth=depth, color=color)

    def edges(self) -> str:
        """The trace as branch records, oldest first, in the format of retsnoop and
        bpflbr (`src -> dst` per line): what LBR records and golden files hold."""
        return edge_list(self)

    def __str__(self) -> str:
        return tree_text(self)


def _names_one(prog: ProgramCalls, names: tuple[str, ...]) -> bool:
    """Whether one of `names` (globs) is the program's name or its kernel alias."""
    return any(match_any(n, names) for n in prog.names)
