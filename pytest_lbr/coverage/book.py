"""Coverage of each program, summed over its runs, tests, shards and kernels.

Pure. A program is known by its name and source file, never by its id or fd, so
the same program loaded by many tests, in xdist workers, shards or kernels adds
up to one `ProgramCoverage`; its results record (`to_record`) is what merges.
A line's count is the number of runs that showed it ran; its `how` the best
knowledge any run gave: "executed" (LBR records show it) over "proven" (the
control flow proves it). A line no run showed is "not observed", never "not run".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_lbr.coverage.code import ProgramCode, SourceLine
from pytest_lbr.coverage.evidence import BranchKey, RunEvidence, graph_run, lbr_run
from pytest_lbr.model import Hit, Trace

__all__ = ["COUNTED", "EXECUTED", "PROVEN", "Counts", "CoverageBook", "ProgramCoverage"]

#: How a covered line is known: LBR records show it ran.
EXECUTED = "executed"
#: How a covered line is known: the program's control flow proves it ran.
PROVEN = "proven"
#: How a covered line is known: a counter in its block counted its runs (exact mode).
COUNTED = "counted"
_RANK = {PROVEN: 1, EXECUTED: 2, COUNTED: 3}


@dataclass(frozen=True)
class Counts:
    """What a program's counters counted over some runs (exact mode): its runs, each
    line's runs (the most of any block holding it), each conditional jump's
    [taken, fell through], every line and jump of the program listed (0: not run)."""

    runs: int
    lines: Mapping[SourceLine, int]
    branches: Mapping[BranchKey, tuple[int, int]]
    #: Runs of blocks with no line of their own.
    unattributed: int = 0


@dataclass
class ProgramCoverage:
    """One program's source lines and what its runs showed of them."""

    program: str
    source: str
    #: Every line with code in the program -> runs that showed it ran (0: not observed).
    lines: dict[SourceLine, int] = field(default_factory=dict)
    #: Covered line -> EXECUTED or PROVEN.
    how: dict[SourceLine, str] = field(default_factory=dict)
    #: Conditional jump -> [runs that took it, runs that fell through] (LBR only).
    branches: dict[BranchKey, list[int]] = field(default_factory=dict)
    runs: int = 0
    #: Runs of the program whose LBR records do not reach back to its entry.
    cut_by_window: int = 0
    #: Runs (or passes through its code) whose records do not show every direction of
    #: its jumps (`RunEvidence.directions_known`).
    unknown_direction_runs: int = 0
    #: Exact mode: runs of blocks of no known line (code the compiler merged from
    #: several lines, which BTF gives none): while above 0, a line counted 0 may have
    #: run that way, so it is "not observed", not "not run" (`all_runs_attributed`).
    unattributed_runs: int = 0
    #: Function name -> (file, the line that declares it, its first line with code):
    #: main first, then subprograms and callbacks.
    functions: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    backends: set[str] = field(default_factory=set)
    #: Test (pytest's node id; "" outside a test) -> what its runs showed: the lines
    #: and branches its runs showed ran, its run counts (`for_test` gives the whole
    #: program seen by one test). Every run is in exactly one.
    contexts: dict[str, ProgramCoverage] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.program, self.source)

    @property
    def directions_complete(self) -> bool:
        """Every run showed every direction its jumps took: a direction no run took
        was never taken (else only the directions taken are known)."""
        return self.runs > 0 and self.unknown_direction_runs == 0

    @property
    def all_runs_attributed(self) -> bool:
        """Exact mode only: every counted run of every block went to a line, so a
        line counted 0 did not run."""
        return self.backends == {COUNTED} and self.unattributed_runs == 0

    def function_runs(self, name: str) -> int:
        """Runs that showed function `name` ran: the program's runs for its main
        function; for a subprogram or callback, the runs that showed its first line."""
        if name == self.program:  # its main function's BTF name
            return self.runs
        where = self.functions.get(name)
        return self.lines.get((where[0], where[2]), 0) if where is not None else 0

    def add_code(self, code: ProgramCode) -> None:
        """Know every line of `code` (a load of this program), covered or not."""
        self.tags.add(code.tag)
        for line in code.lines:
            self.lines.setdefault(line, 0)
        for line, n in _jump_keys(code):
            self.branches.setdefault((line, n), [0, 0])
        for f, fn in enumerate(code.functions):
            where = code.function_lines(f)
            if where is not None:
                self.functions.setdefault(fn.name, where)

    def add_run(
        self, ev: RunEvidence, *, backend: str, counted: bool, context: str | None = ""
    ) -> None:
        """Add what one run showed; `counted`: the run is a hit of this program
        (counted in `runs`, and in `cut_by_window` when its records miss its entry);
        `context`: the test it ran in (None: kept in no context, as in a context's own)."""
        if context is not None:
            ctx = self.contexts.get(context)
            if ctx is None:
                ctx = self.contexts[context] = ProgramCoverage(self.program, self.source)
            ctx.add_run(ev, backend=backend, counted=counted, context=None)
        self.backends.add(backend)
        if counted:
            self.runs += 1
            if not ev.entered:
                self.cut_by_window += 1
        if not ev.directions_known:
            self.unknown_direction_runs += 1
        for how, lines in ((EXECUTED, ev.executed), (PROVEN, ev.proven)):
            for line in lines:
                self.lines[line] = self.lines.get(line, 0) + 1
                if _RANK[how] > _RANK.get(self.how.get(line, ""), 0):
                    self.how[line] = how
        for key, directions in ev.branches.items():
            counts = self.branches.setdefault(key, [0, 0])
            counts[0] += True in directions
            counts[1] += False in directions

    def add_counts(self, counts: Counts, *, context: str | None = "") -> None:
        """Add what a program's counters counted (`context`: the test, as `add_run`)."""
        if context is not None:
            ctx = self.contexts.get(context)
            if ctx is None:
                ctx = self.contexts[context] = ProgramCoverage(self.program, self.source)
            ctx.add_counts(counts, context=None)
        self.backends.add(COUNTED)
        self.runs += counts.runs
        self.unattributed_runs += counts.unattributed
        for line, n in counts.lines.items():
            self.lines[line] = self.lines.get(line, 0) + n
            if n:
                self.how[line] = COUNTED
        for key, (taken, fell) in counts.branches.items():
            mine = self.branches.setdefault(key, [0, 0])
            mine[0] += taken
            mine[1] += fell

    def merge(self, other: ProgramCoverage) -> None:
        """Add another session's (or kernel's) coverage of the same program."""
        for line, count in other.lines.items():
            self.lines[line] = self.lines.get(line, 0) + count
        for line, how in other.how.items():  # "counted" over the rest
            if _RANK[how] > _RANK.get(self.how.get(line, ""), 0):
                self.how[line] = how
        for key, (t, f) in other.branches.items():
            counts = self.branches.setdefault(key, [0, 0])
            counts[0] += t
            counts[1] += f
        self.runs += other.runs
        self.cut_by_window += other.cut_by_window
        self.unknown_direction_runs += other.unknown_direction_runs
        self.unattributed_runs += other.unattributed_runs
        for name, where in other.functions.items():
            self.functions.setdefault(name, where)
        self.tags |= other.tags
        self.backends |= other.backends
        for test, ctx in other.contexts.items():
            mine = self.contexts.get(test)
            if mine is None:
                self.contexts[test] = ProgramCoverage.from_record(ctx.to_record())
            else:
                mine.merge(ctx)

    def tests_of(self, line: SourceLine) -> list[str]:
        """The tests whose runs showed `line` ran, by name ("" outside any test)."""
        return sorted(t for t, ctx in self.contexts.items() if ctx.lines.get(line))

    def for_test(self, test: str) -> ProgramCoverage:
        """The program as one test's runs saw it: every line and branch of it, counted
        over that test's runs only."""
        return self._seen_by(self.contexts.get(test))

    def without_runs(self) -> ProgramCoverage:
        """Every line and branch of the program, none counted: its code alone."""
        return self._seen_by(None)

    def _seen_by(self, ctx: ProgramCoverage | None) -> ProgramCoverage:
        ctx = ctx or ProgramCoverage(self.program, self.source)
        out = ProgramCoverage(self.program, self.source, functions=dict(self.functions))
        out.lines = {line: ctx.lines.get(line, 0) for line in self.lines}
        out.how = {line: how for line, how in ctx.how.items() if line in out.lines}
        out.branches = {k: list(ctx.branches.get(k, (0, 0))) for k in self.branches}
        out.runs, out.cut_by_window = ctx.runs, ctx.cut_by_window
        out.unknown_direction_runs = ctx.unknown_direction_runs
        out.unattributed_runs = ctx.unattributed_runs
        out.tags, out.backends = set(self.tags), set(ctx.backends)
        return out

    def files(self) -> list[str]:
        """Its source files, the main one first."""
        rest = sorted({f for f, _ in self.lines} - {self.source})
        return [self.source, *rest] if self.source else rest

    def file_lines(self, file: str) -> dict[int, int]:
        """Line -> count, of one file."""
        return {ln: c for (f, ln), c in sorted(self.lines.items()) if f == file}

    def to_record(self) -> dict[str, Any]:
        """The results file's `coverage` record (docs/results.md)."""
        return {
            "program": self.program,
            "source": self.source,
            "tags": sorted(self.tags),
            "backends": sorted(self.backends),
            "runs": self.runs,
            "cut_by_window": self.cut_by_window,
            "lines": [
                [f, ln, count, self.how.get((f, ln), "")]
                for (f, ln), count in sorted(self.lines.items())
            ],
            "branches": [
                [f, ln, n, t, nt] for ((f, ln), n), (t, nt) in sorted(self.branches.items())
            ],
            "unknown_direction_runs": self.unknown_direction_runs,
            "unattributed_runs": self.unattributed_runs,
            "functions": [[name, *where] for name, where in self.functions.items()],
            "contexts": {test: _context_record(ctx) for test, ctx in sorted(self.contexts.items())},
        }

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> ProgramCoverage:
        """The inverse of `to_record`."""
        out = cls(str(data["program"]), str(data["source"]))
        out.tags = set(data.get("tags", ()))
        out.backends = set(data.get("backends", ()))
        out.runs = int(data.get("runs", 0))
        out.cut_by_window = int(data.get("cut_by_window", 0))
        for f, ln, count, how in data.get("lines", ()):
            out.lines[(f, ln)] = count
            if how:
                out.how[(f, ln)] = how
        for f, ln, n, t, nt in data.get("branches", ()):
            out.branches[((f, ln), n)] = [t, nt]
        unknown = data.get("unknown_direction_runs")
        # A record from before the field: its zeros were never proven.
        out.unknown_direction_runs = out.runs if unknown is None else int(unknown)
        out.unattributed_runs = int(data.get("unattributed_runs", 0))
        for name, f, ln, first in data.get("functions", ()):
            out.functions[str(name)] = (str(f), int(ln), int(first))
        contexts = data.get("contexts")
        if contexts is None and out.runs:  # a record from before contexts: one, unnamed
            contexts = {"": {**data, "contexts": {}}}
        for test, ctx in (contexts or {}).items():
            out.contexts[str(test)] = cls.from_record(
                {"program": out.program, "source": out.source, **ctx, "contexts": {}}
            )
        return out


def _context_record(ctx: ProgramCoverage) -> dict[str, Any]:
    """A context's part of the record: its runs, and only the lines and branches its
    runs showed (the program's record lists them all)."""
    record = ctx.to_record()
    return {
        "backends": record["backends"],
        "runs": ctx.runs,
        "cut_by_window": ctx.cut_by_window,
        "unknown_direction_runs": ctx.unknown_direction_runs,
        "unattributed_runs": ctx.unattributed_runs,
        "lines": [row for row in record["lines"] if row[2]],
        "branches": [row for row in record["branches"] if row[3] or row[4]],
    }


def _jump_keys(code: ProgramCode) -> Iterable[BranchKey]:
    seen: dict[SourceLine, int] = {}
    for addr, _ in code.jumps:
        k = code.record_at(addr)
        line = code.line_of(k) if k is not None else None
        if line is not None:
            seen[line] = seen.get(line, -1) + 1
            yield (line, seen[line])


class CoverageBook:
    """Every program's coverage in a session (or merged from several)."""

    def __init__(self) -> None:
        self.programs: dict[tuple[str, str], ProgramCoverage] = {}

    def program(self, code: ProgramCode) -> ProgramCoverage:
        """The coverage of `code`'s program, knowing all of its lines."""
        cov = self.programs.get((code.name, code.source))
        if cov is None:
            cov = self.programs[(code.name, code.source)] = ProgramCoverage(code.name, code.source)
        cov.add_code(code)
        return cov

    def merge(self, cov: ProgramCoverage) -> None:
        """Add a program's coverage from elsewhere (a worker, a shard, a kernel)."""
        mine = self.programs.get(cov.key)
        if mine is None:
            self.programs[cov.key] = ProgramCoverage.from_record(cov.to_record())
        else:
            mine.merge(cov)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> CoverageBook:
        """The coverage of several sessions' `coverage` records (results files of
        kernels, shards) summed, program by program."""
        book = cls()
        for record in records:
            book.merge(ProgramCoverage.from_record(dict(record)))
        return book

    def sorted(self) -> list[ProgramCoverage]:
        """By source file, then program."""
        return [self.programs[k] for k in sorted(self.programs, key=lambda k: (k[1], k[0]))]

    def add_trace(
        self,
        trace: Trace,
        codes: Mapping[int, ProgramCode],
        targets: Mapping[str, int],
        *,
        every_branch: bool = True,
        context: str = "",
    ) -> None:
        """Add what `trace` shows of the programs in `codes` (by program id; read while
        they were loaded): each target program (`targets`: target spec -> program id)
        and each program whose code the records went through. `every_branch`: the
        LBR records hold every taken branch (no LBR filter). `context`: the test
        the trace belongs to (pytest's node id)."""
        for pid in set(targets.values()):
            if pid in codes:
                self.program(codes[pid])
        branches = trace.backend == "lbr" and not trace.no_branches
        for hit in trace.hits:
            own = targets.get(hit.target)
            for pid in _programs_in(hit) | ({own} if own is not None else set()):
                code = codes.get(pid)
                if code is None:
                    continue
                entered = pid == own
                if branches:
                    ev = lbr_run(code, hit.branches, entered=entered, every_branch=every_branch)
                else:
                    ev = graph_run(code, _call_returns(hit, code), entered)
                self.program(code).add_run(
                    ev, backend=trace.backend, counted=entered, context=context
                )


def _programs_in(hit: Hit) -> set[int]:
    """The ids of the programs whose code the hit's records name."""
    out = set()
    for b in hit.branches:
        for loc in (b.src, b.dst):
            if loc.program is not None:
                out.add(loc.program.prog_id)
    return out


def _call_returns(hit: Hit, code: ProgramCode) -> list[int]:
    """Where the function tracer saw `code` call out (the return address), recorded
    and implied calls alike."""
    return [
        b.src.addr
        for b in hit.branches
        if b.kind in ("call", "implied") and code.function_at(b.src.addr) is not None
    ]
