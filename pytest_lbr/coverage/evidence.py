"""What one run of a program shows of its source lines, from a backend's records.

Pure. Two kinds of knowledge, never mixed up:

- executed (LBR): the records are taken branches. The code between one record's
  destination and the next record's source ran straight through, so the line
  records whose JIT code that span overlaps ran; a conditional jump inside it fell
  through, one a record leaves from was taken. Only the last N branches are kept:
  where the records do not reach back to the program's entry, what ran before the
  oldest one is not observed (`RunEvidence.entered` False).
- proven (control flow, both backends): a block that ran proves every block that
  dominates it (`pytest_lbr.bytecode.flow`); a recorded call site (graph) proves its block; the entry
  block of every run of a traced program ran.

A JIT address names a line record, not an instruction: where a record's
instructions lie in several blocks, only what every one of them proves is proven.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_lbr.bytecode.instructions import is_jit_call
from pytest_lbr.coverage.code import ProgramCode, SourceLine
from pytest_lbr.model import Branch

__all__ = ["BranchKey", "RunEvidence", "graph_run", "lbr_run"]

#: A conditional jump of the JIT code: (its source line, its order among that line's jumps).
BranchKey = tuple[SourceLine, int]


@dataclass
class RunEvidence:
    """One run of one program: the lines it shows ran, and how."""

    executed: set[SourceLine] = field(default_factory=set)
    proven: set[SourceLine] = field(default_factory=set)
    #: Conditional jump -> the directions seen: True taken, False fell through.
    branches: dict[BranchKey, set[bool]] = field(default_factory=dict)
    #: The records reach back to the program's entry (LBR); always True for graph.
    entered: bool = True
    #: Every execution of its conditional jumps in this run shows its direction (LBR
    #: records of every branch from the program's entry on): a direction seen in no
    #: such run was never taken. False for graph, which records calls, not jumps.
    directions_known: bool = False


def _proven_blocks(code: ProgramCode, records: Iterable[int], calls_only: bool) -> set[int]:
    """The blocks proven to have run by code in each of `records` having run (with
    `calls_only`: by one of each record's call instructions having run)."""
    flow = code.flow
    out: set[int] = set()
    for k in records:
        insns = code.record_insns(k)
        picked = [i for i in insns if not calls_only or is_jit_call(flow.insns[i])]
        blocks = {flow.block_of[i] for i in picked if flow.block_of[i] >= 0}
        if not blocks:
            continue
        common = frozenset.intersection(*(flow.proven_by(b) for b in blocks))
        out.update(common)
    return out


def _prove(code: ProgramCode, ev: RunEvidence, blocks: Iterable[int]) -> None:
    for b in blocks:
        ev.proven.update(code.block_lines(b))


def graph_run(code: ProgramCode, call_returns: Iterable[int], entered: bool) -> RunEvidence:
    """A run recorded by the function tracer: `call_returns` are the JIT return
    addresses of its recorded calls (and implied ones) inside this program;
    `entered`: the run is a hit of this program (its entry block ran)."""
    ev = RunEvidence()
    records = []
    for ret in call_returns:
        k = code.record_at(ret - 1)  # the call instruction's last byte
        if k is not None:
            records.append(k)
    # The call's block ran: its lines (`ProgramCode.block_lines`), the call's among them.
    _prove(code, ev, _proven_blocks(code, records, calls_only=True))
    if entered and code.flow.entries:
        _prove(code, ev, code.flow.proven_by(code.flow.entries[0]))
    return ev


def lbr_run(
    code: ProgramCode, branches: Sequence[Branch], *, entered: bool, every_branch: bool = True
) -> RunEvidence:
    """A run recorded by LBR: `branches` oldest first (a hit's); `entered`: the hit is
    a run of this program; `every_branch`: the records hold every taken branch (no
    LBR filter), so the code between two records ran straight through."""
    ev = RunEvidence(entered=False)
    main = code.functions[0].jit_start if code.functions else -1
    executed: set[int] = set()
    taken: set[int] = set()
    spans: list[tuple[int, int]] = []
    for i, b in enumerate(branches):
        for addr in (b.src.addr, b.dst.addr):
            k = code.record_at(addr)
            if k is not None:
                executed.add(k)
        if code.function_at(b.src.addr) is not None:
            taken.add(b.src.addr)
        if b.dst.addr == main:
            ev.entered = True
        nxt = branches[i + 1] if i + 1 < len(branches) else None
        if every_branch and nxt is not None:
            start, end = b.dst.addr, nxt.src.addr
            f = code.function_at(start)
            if f is not None and f == code.function_at(end) and start <= end:
                spans.append((start, end))
                executed.update(code.records_between(start, end))
    ran = {a for b in branches for a in (b.src.addr, b.dst.addr)}
    for k in executed:
        # A record's line is where it begins: code of no one line after it reads as
        # its line (`ProgramCode._insn_lines`), so only a run through its first
        # instruction shows the line ran.
        first = code.records[k].jit
        line = code.line_of(k)
        if line is not None and (first in ran or any(s <= first <= e for s, e in spans)):
            ev.executed.add(line)
            ev.executed.update(code.calls_at(code.records[k].insn))  # inlined: its caller
    _directions(code, ev, taken, spans)
    ev.directions_known = ev.entered and every_branch
    _prove(code, ev, _proven_blocks(code, executed, calls_only=False))
    if entered and code.flow.entries:
        _prove(code, ev, code.flow.proven_by(code.flow.entries[0]))
    ev.proven -= ev.executed
    return ev


def _directions(
    code: ProgramCode, ev: RunEvidence, taken: set[int], spans: list[tuple[int, int]]
) -> None:
    """The directions of the conditional jumps: taken where a record leaves one,
    fallen through where one lies inside a span that ran straight through."""
    seen: dict[SourceLine, int] = {}
    for addr, _target in code.jumps:
        k = code.record_at(addr)
        line = code.line_of(k) if k is not None else None
        if line is None:
            continue
        n = seen[line] = seen.get(line, -1) + 1
        directions: set[bool] = set()
        if addr in taken:
            directions.add(True)
        if any(start <= addr < end for start, end in spans):
            directions.add(False)
        ev.branches.setdefault((line, n), set()).update(directions)
