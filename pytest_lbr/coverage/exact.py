"""Exact coverage: programs of the `bpf` fixture run with a counter per basic block.

`ExactCoverage.after_load` is the harness's hook (`BpfLoader(after_load=...)`): each
program of a loaded object is loaded again with counters (`bpf.counted`) in place of
the original. `read_into` adds what the counters counted since the last read to a
`CoverageBook`, under the test that ran (the plugin reads after every test; the
counters outlive the program, so a program closed by its test is read too). A line
counts the runs of its busiest block; a conditional jump's directions are its
block's runs split by the fall-through's counter: exact, with no sampling window and
no backend. The counted program is what runs: its JIT image is not the one LBR and
the function tracer would read, so traces add nothing to the coverage of a counted
program (`ids`). Tested by tests/kernel/test_coverage_exact.py and
tests/coverage/test_exact.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_lbr.bpf.counted import CountedProgram, count_object
from pytest_lbr.bpf.libbpf import BpfError
from pytest_lbr.bytecode.flow import without_constants
from pytest_lbr.coverage.book import Counts, CoverageBook
from pytest_lbr.coverage.code import Function, LineRecord, ProgramCode, SourceLine
from pytest_lbr.coverage.evidence import BranchKey
from pytest_lbr.coverage.program import declared
from pytest_lbr.programs.lines import source_path

__all__ = ["ExactCoverage", "counts_of", "program_code"]


class ExactCoverage:
    """The session's counted programs, read after each test."""

    def __init__(self) -> None:
        #: One line per program that runs without counters, and why.
        self.problems: list[str] = []
        #: The counted programs' ids (their traces add no coverage).
        self.ids: set[int] = set()
        self._programs: list[tuple[CountedProgram, ProgramCode, dict[int, BranchKey]]] = []

    def after_load(self, ptr: int, path: str | os.PathLike[str]) -> dict[str, bytes]:
        """The harness's hook: count every program of object `ptr`; program name ->
        the instructions it now runs."""
        counted = count_object(ptr, Path(path), self._problem)
        for c in counted.values():
            code, keys = _code_and_keys(c)
            self._programs.append((c, code, keys))
            self.ids.add(c.prog_id)
        return {name: c.layout.insns for name, c in counted.items()}

    def read_into(self, book: CoverageBook, context: str = "") -> None:
        """Add every counted program's runs since the last read, under `context`;
        let go of the counters of programs since unloaded."""
        for entry in list(self._programs):
            c, code, keys = entry
            try:
                delta = c.read()
            except BpfError as exc:
                self._problem(f"coverage: {exc}")
                delta = []
            cov = book.program(code)
            if delta:
                cov.add_counts(counts_of(code, c, keys, delta), context=context)
            if c.gone():
                c.close()
                self._programs.remove(entry)
                self.ids.discard(c.prog_id)

    def close(self) -> None:
        """Let every counter go."""
        for c, _, _ in self._programs:
            c.close()
        self._programs.clear()

    def _problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


def _code_and_keys(c: CountedProgram) -> tuple[ProgramCode, dict[int, BranchKey]]:
    """`program_code` and `branch_keys` of `c`, worked out once per shape: the same
    object loaded again differs only in its maps' fds, which neither depends on."""
    shape = (
        without_constants(c.insns),
        c.function_starts,
        c.function_names,
        c.lines,
        c.inlined,
        c.tag,
        c.layout.block_counters,
        tuple(sorted(c.layout.fall_counters.items())),
    )
    found = _SHAPES.get(shape)
    if found is None:
        code = program_code(c)
        found = _SHAPES[shape] = (code, branch_keys(code, c))
        while len(_SHAPES) > _MAX_SHAPES:
            del _SHAPES[next(iter(_SHAPES))]
    return found


#: Programs' code and branch keys by shape (`_code_and_keys`), the oldest let go first.
_SHAPES: dict[tuple[object, ...], tuple[ProgramCode, dict[int, BranchKey]]] = {}
_MAX_SHAPES = 64


def program_code(c: CountedProgram) -> ProgramCode:
    """The program as written, as coverage reads it: libbpf's instructions and the
    object's line records (no JIT addresses: counters need none)."""
    records = tuple(sorted(LineRecord(i, 0, source_path(f), ln) for i, f, ln in c.lines))
    functions = [
        Function(name or c.name, start, 0, 0)
        for name, start in zip(c.function_names, c.function_starts, strict=True)
    ]
    return ProgramCode(
        functions[0].name,
        c.tag,
        c.insns,
        tuple(declared(fn, list(records)) for fn in functions),
        records,
        inlined=tuple((a, b, source_path(f), ln) for a, b, f, ln in c.inlined),
    )


def branch_keys(code: ProgramCode, c: CountedProgram) -> dict[int, BranchKey]:
    """Block (ending in a conditional jump with a known line) -> its branch key: the
    jump's line and its rank among that line's jumps, in instruction order."""
    flow = code.flow
    seen: dict[SourceLine, int] = {}
    out: dict[int, BranchKey] = {}
    for b in sorted(c.layout.fall_counters, key=lambda b: flow.blocks[b].start):
        line = code.line_at(flow.blocks[b].end - 1)  # the jump: never a 64-bit load
        if line is not None:
            seen[line] = seen.get(line, -1) + 1
            out[b] = (line, seen[line])
    return out


def counts_of(
    code: ProgramCode, c: CountedProgram, keys: dict[int, BranchKey], delta: list[int]
) -> Counts:
    """What `delta` (each counter's runs) says of `code`'s lines and jumps."""
    layout, flow = c.layout, code.flow
    lines: dict[SourceLine, int] = dict.fromkeys(code.lines, 0)
    unattributed = 0
    for b in range(len(flow.blocks)):
        n = delta[layout.block_counters[b]]
        own = code.block_lines(b)
        unattributed += 0 if own else n
        for line in own:
            lines[line] = max(lines.get(line, 0), n)
    branches: dict[BranchKey, tuple[int, int]] = {}
    for b, key in keys.items():
        fell = delta[layout.fall_counters[b]]
        branches[key] = (delta[layout.block_counters[b]] - fell, fell)
    return Counts(delta[layout.block_counters[flow.entries[0]]], lines, branches, unattributed)
