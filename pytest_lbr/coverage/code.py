"""A loaded program's code as coverage needs it: instructions, functions, line records.

Pure data (`read_code` in `coverage.program` fills it from the kernel; tests build
it from what a guest saved). The line records come from `bpf_prog_info`'s
line_info (translated instruction -> file:line) and, one for one, jited_line_info
(the JIT address where that record's code starts): so a JIT address falls in one
record, whose instructions and line it names.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pytest_lbr.bytecode.flow import ControlFlow, control_flow
from pytest_lbr.bytecode.instructions import LD_IMM64, Insn, is_tail_call, successors

__all__ = ["Function", "LineRecord", "ProgramCode", "SourceLine", "first_line_record"]

#: A line of C source: (file, line number).
SourceLine = tuple[str, int]


@dataclass(frozen=True)
class Function:
    """One function of a program: its name, first translated instruction, JIT range."""

    name: str
    insn: int
    jit_start: int
    jit_end: int
    #: The source line that declares it (`int xdp_filter(struct xdp_md *ctx)`): the
    #: line records start at its first statement. 0: not found.
    line: int = 0


@dataclass(frozen=True, order=True)
class LineRecord:
    """Translated instructions from `insn` on are line `line` of `file`; their JIT
    code starts at `jit`. Line 0: code the compiler gave no line."""

    insn: int
    jit: int
    file: str
    line: int


@dataclass(frozen=True)
class ProgramCode:
    """What coverage reads of one loaded program (see the module docstring)."""

    name: str
    tag: str
    xlated: bytes
    #: Main program first, in instruction order.
    functions: tuple[Function, ...]
    #: Sorted by instruction.
    records: tuple[LineRecord, ...]
    #: (address, target) of each conditional jump of the JIT image, in address order
    #: (empty where the image could not be read or disassembled).
    jumps: tuple[tuple[int, int], ...] = ()
    #: (first, end, file, line): translated instructions [first, end) are an inlined
    #: copy of a function called at file:line (from the object's DWARF: known for
    #: programs of the `bpf` fixture).
    inlined: tuple[tuple[int, int, str, int], ...] = ()

    @functools.cached_property
    def flow(self) -> ControlFlow:
        """The control flow of its translated instructions."""
        return control_flow(self.xlated, [f.insn for f in self.functions])

    @functools.cached_property
    def source(self) -> str:
        """The source file of the main program (its first record that names a line)."""
        for r in self.records:
            if r.line:
                return r.file
        return ""

    @functools.cached_property
    def lines(self) -> frozenset[SourceLine]:
        """Every source line that has code in this program (inlined calls' lines too)."""
        own = {(r.file, r.line) for r in self.records if r.line}
        return frozenset(own | {(f, ln) for _, _, f, ln in self.inlined})

    @functools.cached_property
    def _by_jit(self) -> list[tuple[int, int]]:
        """(JIT address, record index), sorted by address."""
        return sorted((r.jit, k) for k, r in enumerate(self.records))

    def function_at(self, addr: int) -> int | None:
        """The index of the function whose JIT code holds `addr`, or None."""
        for f, fn in enumerate(self.functions):
            if fn.jit_start <= addr < fn.jit_end:
                return f
        return None

    def record_at(self, addr: int) -> int | None:
        """The index of the line record whose JIT code holds `addr` (None: not in
        this program)."""
        f = self.function_at(addr)
        if f is None:
            return None
        keys = self._by_jit
        i = bisect.bisect_right(keys, (addr, len(self.records))) - 1
        if i < 0 or keys[i][0] < self.functions[f].jit_start:
            return None
        return keys[i][1]

    def records_between(self, start: int, end: int) -> Iterator[int]:
        """The records whose JIT code overlaps [start, end] (one function's addresses)."""
        first = self.record_at(start)
        if first is None:
            return
        keys = self._by_jit
        i = bisect.bisect_left(keys, (self.records[first].jit, first))
        while i < len(keys) and keys[i][0] <= end:
            yield keys[i][1]
            i += 1

    def record_insns(self, k: int) -> range:
        """The translated instructions of record `k`."""
        start = self.records[k].insn
        nxt = self.records[k + 1].insn if k + 1 < len(self.records) else len(self.flow.insns)
        ends = [f.insn for f in self.functions if f.insn > start]
        return range(start, min([nxt, *ends]))

    def function_lines(self, f: int) -> tuple[str, int, int] | None:
        """(file, the line that declares function `f`, its first line with code); the
        declaration is the first line with code where unknown (None: it has no line
        records)."""
        fn = self.functions[f]
        first = first_line_record(self.records, fn.insn)
        if first is None:
            return None
        return (first.file, fn.line or first.line, first.line)

    def line_of(self, k: int) -> SourceLine | None:
        """The source line of record `k` (None for line 0)."""
        r = self.records[k]
        return (r.file, r.line) if r.line else None

    @functools.cached_property
    def _insn_lines(self) -> list[SourceLine | None]:
        """Each translated instruction's source line, None where it is not known.

        A line record covers the instructions up to the next one, but the compiler
        gives no record to code of no one line (line 0: BTF keeps no such records),
        so such code reads as the line before it. Code a jump enters (a join of
        several paths: clang merges the same tail of several arms, as
        many_arms.bpf.c's four `bpf_map_update_elem` calls into two) or that no
        instruction falls into (after a `goto`, an `exit`: clang put one arm's
        `r6 = 1` after another arm's `goto`) is not the line before it: read so, a
        run of one arm proved a line of another (tests/kernel/test_coverage_truth.py).
        Its line is not known until a record begins there."""
        insns = self.flow.insns
        joins = {
            t
            for j, ins in enumerate(insns)
            for t in successors(ins, j)
            if t != j + (2 if ins.code == LD_IMM64 else 1)
        }
        out: list[SourceLine | None] = [None] * len(insns)
        for k in range(len(self.records)):
            line = self.line_of(k)
            prev = -1
            for i in self.record_insns(k):
                if prev >= 0 and insns[prev].code == LD_IMM64 and i == prev + 1:
                    out[i] = line  # the second half of a 64-bit load
                    continue
                if prev >= 0 and (i in joins or not _falls_into(insns[prev], prev, i)):
                    line = None
                out[i] = line
                prev = i
        return out

    def line_at(self, insn: int) -> SourceLine | None:
        """The source line of translated instruction `insn` (None: not known)."""
        return self._insn_lines[insn]

    def calls_at(self, insn: int) -> set[SourceLine]:
        """The lines that called the inlined functions whose code `insn` is part of."""
        return {(f, ln) for first, end, f, ln in self.inlined if first <= insn < end}

    def block_lines(self, block: int) -> set[SourceLine]:
        """The source lines of a block's instructions, and the lines that called the
        inlined functions they are part of (where their own line is known: code
        merged from several calls is no call's)."""
        blk = self.flow.blocks[block]
        lines = self._insn_lines
        out = {ln for i in range(blk.start, blk.end) if (ln := lines[i]) is not None}
        for first, end, file, line in self.inlined:
            if any(lines[i] is not None for i in range(max(first, blk.start), min(end, blk.end))):
                out.add((file, line))
        return out

    def to_json(self) -> dict[str, object]:
        """A JSON-able form (test data saved from a guest)."""
        return {
            "name": self.name,
            "tag": self.tag,
            "xlated": self.xlated.hex(),
            "functions": [[f.name, f.insn, f.jit_start, f.jit_end, f.line] for f in self.functions],
            "records": [[r.insn, r.jit, r.file, r.line] for r in self.records],
            "jumps": [list(j) for j in self.jumps],
            "inlined": [list(c) for c in self.inlined],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProgramCode:
        """The inverse of `to_json`."""
        funcs: list[list[object]] = data["functions"]  # type: ignore[assignment]
        records: list[list[object]] = data["records"]  # type: ignore[assignment]
        jumps: list[list[int]] = data.get("jumps", [])  # type: ignore[assignment]
        inlined: list[list[object]] = data.get("inlined", [])  # type: ignore[assignment]
        return cls(
            str(data["name"]),
            str(data["tag"]),
            bytes.fromhex(str(data["xlated"])),
            tuple(Function(str(f[0]), *(int(x) for x in f[1:])) for f in funcs),  # type: ignore[call-overload]
            tuple(LineRecord(int(i), int(j), str(f), int(ln)) for i, j, f, ln in records),  # type: ignore[call-overload]
            tuple((a, t) for a, t in jumps),
            tuple((int(a), int(b), str(f), int(ln)) for a, b, f, ln in inlined),  # type: ignore[call-overload]
        )


def first_line_record(records: Sequence[LineRecord], insn: int) -> LineRecord | None:
    """The first of `records` (sorted) at or after instruction `insn` that names a
    line: where a function starting there begins in the source."""
    return next((r for r in records if r.insn >= insn and r.line), None)


def _falls_into(ins: Insn, at: int, i: int) -> bool:
    """Whether instruction `i` is reached from `ins` (at `at`) by falling through:
    not after an unconditional jump, an exit or a tail call."""
    return i in successors(ins, at) and not is_tail_call(ins)
