"""A BPF program's control-flow graph and dominators, over its translated instructions.

Pure: the instructions are bytes (`bpf_prog_info.xlated_prog_insns`) and the
functions' first instructions (`func_info`). A block ends at a jump, an exit or a
tail call (which does not come back when it succeeds); a call returns, so it ends
no block. Each function (the main program, a subprogram, a callback) is a graph of
its own, entered at its first instruction. Once entered, a block runs to its end:
so a block that ran proves that every block dominating it ran too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_lbr.kernel.helpers import Insn, decode_insns

__all__ = ["Block", "ControlFlow", "control_flow", "is_call", "is_jit_call"]

_CLASS_JMP, _CLASS_JMP32 = 0x05, 0x06
_OP_JA, _OP_CALL, _OP_EXIT = 0x00, 0x80, 0x90
_LD_IMM64 = 0x18
_TAIL_CALL = 12  # BPF_FUNC_tail_call
_PSEUDO_CALL = 1  # src_reg of a call of a subprogram


@dataclass(frozen=True)
class Block:
    """Translated instructions [start, end) that run together, in function `function`."""

    start: int
    end: int
    function: int


def is_call(ins: Insn) -> bool:
    """A BPF call instruction (helper, kfunc, subprogram)."""
    return ins.code == _CLASS_JMP | _OP_CALL


def _is_tail_call(ins: Insn) -> bool:
    return is_call(ins) and ins.src == 0 and ins.imm == _TAIL_CALL


def is_jit_call(ins: Insn) -> bool:
    """A call the JIT emits as a call of kernel code (a helper or kfunc), which the
    function tracer can record: not a tail call (a jump) nor a subprogram call."""
    return is_call(ins) and not _is_tail_call(ins) and ins.src != _PSEUDO_CALL


def _successors(ins: Insn, i: int) -> list[int]:
    """Where control goes after instruction `i` (jumps are relative to i + 1)."""
    if ins.code == _LD_IMM64:
        return [i + 2]
    cls, op = ins.code & 0x07, ins.code & 0xF0
    if cls not in (_CLASS_JMP, _CLASS_JMP32) or op == _OP_CALL:
        return [i + 1]
    if op == _OP_EXIT:
        return []
    if op == _OP_JA:  # JMP32 | JA (gotol) takes its offset from imm
        return [i + 1 + (ins.imm if cls == _CLASS_JMP32 else ins.off)]
    return [i + 1, i + 1 + ins.off]


def _ends_block(ins: Insn) -> bool:
    cls, op = ins.code & 0x07, ins.code & 0xF0
    jump = cls in (_CLASS_JMP, _CLASS_JMP32) and op != _OP_CALL
    return jump or _is_tail_call(ins)


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


def control_flow(xlated: bytes, function_starts: Sequence[int] = (0,)) -> ControlFlow:
    """The control flow of translated instructions `xlated` whose functions start at
    `function_starts` (func_info's insn_off; the main program at 0)."""
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
        succ = [j for j in _successors(insns[i], i) if 0 <= j < n and func_of[j] == func_of[i]]
        if _ends_block(insns[i]):
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
        width = 2 if insns[i].code == _LD_IMM64 else 1
        blocks[-1] = Block(blocks[-1].start, i + width, f)
        last[-1] = i
        block_of[i] = len(blocks) - 1
        open_block = not _ends_block(insns[i])
    edges: dict[int, list[int]] = {}
    for b, i in enumerate(last):
        edges[b] = [
            block_of[j]
            for j in _successors(insns[i], i)
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
