"""A BPF program's control flow over its translated instructions: blocks,
dominators, reachability, and the calls that ran before a call.

Pure: the instructions are bytes (`bpf_prog_info.xlated_prog_insns`) and the
functions' first instructions (`func_info`). A block ends at a jump, an exit or a
tail call (`instructions.ends_block`); a call returns, so it ends no block. Each
function (the main program, a subprogram, a callback) is a graph of its own,
entered at its first instruction. Once entered, a block runs to its end: so a
block that ran proves that every block dominating it ran too. That one rule serves
coverage (a block that ran proves its dominators' lines) and the calls a function
tracer cannot record (`capture.implied`: a call site that dominates a recorded
call ran in that run).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from .instructions import (
    FUNC_TAIL_CALL,
    LD_IMM64,
    Insn,
    decode_insns,
    ends_block,
    is_call,
    successors,
)

__all__ = [
    "Block",
    "ControlFlow",
    "call_dominators",
    "control_flow",
    "jit_call_index",
    "main_calls",
    "main_flows_worked_out",
    "without_constants",
]


@dataclass(frozen=True)
class Block:
    """Translated instructions [start, end) that run together, in function `function`."""

    start: int
    end: int
    function: int


@dataclass(frozen=True)
class ControlFlow:
    """The blocks of a program, which block each instruction is in, and each block's
    dominators (itself included)."""

    insns: tuple[Insn, ...]
    blocks: tuple[Block, ...]
    #: Instruction index -> block index (-1: the second half of a 64-bit load,
    #: or code no path reaches).
    block_of: tuple[int, ...]
    #: Block index -> the blocks every path from its function's entry goes through.
    dominators: tuple[frozenset[int], ...]
    #: The entry block of each function, main program first.
    entries: tuple[int, ...]

    def proven_by(self, block: int) -> frozenset[int]:
        """The blocks that ran if `block` ran: itself and its dominators."""
        return self.dominators[block]

    def ran_before(self, i: int, j: int) -> bool:
        """Whether instruction `j` ran before instruction `i` on every path from its
        function's entry to `i` (both reachable)."""
        bi, bj = self.block_of[i], self.block_of[j]
        if bi < 0 or bj < 0:
            return False
        return j < i if bi == bj else bj in self.dominators[bi]


def control_flow(xlated: bytes, function_starts: Sequence[int] = (0,)) -> ControlFlow:
    """The control flow of translated instructions `xlated` whose functions start at
    `function_starts` (func_info's insn_off; the main program at 0). Code of a
    function not listed is reached by no path (a call returns to the next instruction)."""
    insns = decode_insns(xlated)
    n = len(insns)
    starts = sorted({0, *function_starts} & set(range(n))) if n else []
    func_of = [0] * n
    for f, s in enumerate(starts):
        for i in range(s, starts[f + 1] if f + 1 < len(starts) else n):
            func_of[i] = f
    # Reachable instructions of each function, and where blocks begin.
    leaders: set[int] = set(starts)
    reach: set[int] = set()
    todo = list(starts)
    while todo:
        i = todo.pop()
        if i in reach or not 0 <= i < n:
            continue
        reach.add(i)
        succ = [j for j in successors(insns[i], i) if 0 <= j < n and func_of[j] == func_of[i]]
        if ends_block(insns[i]):
            leaders.update(succ)
        todo.extend(succ)
    blocks: list[Block] = []
    block_of = [-1] * n
    last: list[int] = []  # each block's last instruction
    open_block = False
    for i in sorted(reach):
        f = func_of[i]
        if not open_block or i in leaders or blocks[-1].end != i or blocks[-1].function != f:
            blocks.append(Block(i, i, f))
            last.append(i)
        width = 2 if insns[i].code == LD_IMM64 else 1
        blocks[-1] = Block(blocks[-1].start, i + width, f)
        last[-1] = i
        block_of[i] = len(blocks) - 1
        open_block = not ends_block(insns[i])
    edges: dict[int, list[int]] = {}
    for b, i in enumerate(last):
        edges[b] = [
            block_of[j]
            for j in successors(insns[i], i)
            if 0 <= j < n and block_of[j] >= 0 and func_of[j] == blocks[b].function
        ]
    entries = tuple(block_of[s] for s in starts)
    return ControlFlow(
        tuple(insns), tuple(blocks), tuple(block_of), _dominators(blocks, edges, entries), entries
    )


def _dominators(
    blocks: Sequence[Block], edges: dict[int, list[int]], entries: Sequence[int]
) -> tuple[frozenset[int], ...]:
    """Each block's dominators within its function: the iterative data-flow
    solution on bit sets (programs are small: a few thousand blocks at most)."""
    preds: dict[int, list[int]] = {b: [] for b in range(len(blocks))}
    for b, succ in edges.items():
        for s in succ:
            preds[s].append(b)
    everything = (1 << len(blocks)) - 1
    dom = [everything] * len(blocks)
    entry_set = set(entries)
    for e in entries:
        dom[e] = 1 << e
    changed = True
    while changed:
        changed = False
        for b in range(len(blocks)):
            if b in entry_set:
                continue
            new = everything
            for p in preds[b]:
                new &= dom[p]
            new |= 1 << b
            if new != dom[b]:
                dom[b], changed = new, True
    out = []
    for b in range(len(blocks)):
        if not preds[b] and b not in entry_set:
            out.append(frozenset({b}))  # reached from no block: proves nothing else
        else:
            out.append(frozenset(d for d in range(len(blocks)) if dom[b] >> d & 1))
    return tuple(out)


def _main_flow(xlated: bytes) -> ControlFlow:
    """The main function's flow, kept for the last few programs: a newly traced
    program's calls are both dominated (`call_dominators`) and paired with its JIT
    image (`jit_call_index`); and kept by its code without its 64-bit constants,
    so the same program loaded again (a fixture per test) finds it worked out."""
    return _flow_of_code(without_constants(xlated))


@functools.lru_cache(maxsize=16)
def _flow_of_code(code: bytes) -> ControlFlow:
    return control_flow(code)


def main_flows_worked_out() -> int:
    """How many main-function flows this process has worked out (for tests: a
    program loaded again is not worked out again)."""
    return _flow_of_code.cache_info().misses


def without_constants(xlated: bytes) -> bytes:
    """`xlated` with the values of its 64-bit loads zeroed: a map's id or address,
    new at every load, and nothing a block, a jump or a call depends on (the
    kernel's program tag leaves them out likewise, `bpf_prog_calc_tag`)."""
    pos = xlated.find(LD_IMM64_BYTE)
    if pos < 0:
        return xlated
    code = bytearray(xlated)
    while pos >= 0:
        if pos % 8 == 0 and pos + 16 <= len(code):  # an opcode, not an operand's byte
            code[pos + 4 : pos + 8] = code[pos + 12 : pos + 16] = bytes(4)
            pos = xlated.find(LD_IMM64_BYTE, pos + 16)
        else:
            pos = xlated.find(LD_IMM64_BYTE, pos + 1)
    return bytes(code)


#: The opcode byte of a 64-bit load (its second half's opcode byte is 0).
LD_IMM64_BYTE = bytes([LD_IMM64])


def main_calls(xlated: bytes) -> list[int]:
    """Indexes of the call instructions reachable from the entry without a call
    (the main function's own calls), in instruction order."""
    return _calls_in(_main_flow(xlated))


def _calls_in(flow: ControlFlow) -> list[int]:
    return [i for i, b in enumerate(flow.block_of) if b >= 0 and is_call(flow.insns[i])]


def call_dominators(xlated: bytes) -> dict[int, frozenset[int]]:
    """Call instruction index -> the call instructions that ran before it on every
    path from the program's entry (its main function; subprograms are entered by
    calls and are not followed)."""
    flow = _main_flow(xlated)
    calls = _calls_in(flow)
    return {c: frozenset(d for d in calls if d != c and flow.ran_before(c, d)) for c in calls}


def jit_call_index(xlated: bytes, call_base: int, jit_targets: Sequence[int]) -> list[int] | None:
    """The translated call instruction of each of the main function's JIT call
    instructions (given by their targets, in order), or None where they do not
    pair one for one. The JIT emits one call instruction per BPF call but a tail
    call (a jump); a helper call's target is `call_base + imm` in both, which is
    checked. Kfunc and subprogram calls pair by position."""
    flow = _main_flow(xlated)
    insns = flow.insns  # calls as translated: no constant zeroed
    calls = [
        k for k in _calls_in(flow) if not (insns[k].src == 0 and insns[k].imm == FUNC_TAIL_CALL)
    ]
    if len(calls) != len(jit_targets):
        return None
    for k, target in zip(calls, jit_targets, strict=True):
        if insns[k].src == 0 and call_base + insns[k].imm != target:
            return None
    return calls
