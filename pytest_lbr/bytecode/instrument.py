"""A counter per basic block: a program's instructions rewritten to count each run.

Exact coverage (`--lbr-cov-exact`) loads every program of the `bpf` fixture again with
`lock *(u64 *)(counters + 8 * k) += 1` at the start of each basic block and on the
fall-through of each conditional jump (so both of its directions are known:
taken = the block's runs - its fall-throughs). The counters live in one array map's
value; the rewrite needs two registers dead at the block's start (backward liveness
over the block graph), or spills what it borrows below the deepest stack slot the
program uses. Jumps, subprogram calls and callback references are re-aimed; a line
or function record at an instruction moves to the counter that now starts its block.

Pure: bytes in, bytes out (`bpf.counted` loads the result). The instructions are
libbpf's, after relocation (subprograms appended, map fds in 64-bit loads). Tested by
tests/bytecode/test_instrument.py (real objects' instructions, checked by an
interpreter of the counters' semantics) and tests/kernel/test_coverage_exact.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_lbr.bytecode.flow import ControlFlow
from pytest_lbr.bytecode.instructions import (
    CALL,
    CLASS_JMP,
    CLASS_JMP32,
    LD_IMM64,
    OP_CALL,
    OP_EXIT,
    OP_JA,
    PSEUDO_CALL,
    PSEUDO_FUNC,
    PSEUDO_MAP_VALUE,
    Insn,
    decode_insns,
    successors,
)

__all__ = ["InstrumentError", "Instrumented", "instrument"]

#: BPF_STX | BPF_DW | BPF_ATOMIC with imm BPF_ADD: `lock *(u64 *)(dst + off) += src`.
_ATOMIC_ADD64 = 0xDB
_STX_DW, _LDX_DW, _MOV64_K = 0x7B, 0x79, 0xB7
_ADD64_K = 0x07
_FP = 10
_MAX_STACK = 512
_ARGS, _CALLER_SAVED = frozenset(range(1, 6)), frozenset(range(6))


class InstrumentError(ValueError):
    """The program cannot take counters (the reason, for the one line the user sees)."""


@dataclass(frozen=True)
class Instrumented:
    """A program with counters: its new instructions and where each count is."""

    insns: bytes
    #: Flow block index -> its counter (index into the u64 array), -1 for none.
    block_counters: tuple[int, ...]
    #: Block index (its last instruction a conditional jump) -> the counter of its
    #: fall-through.
    fall_counters: dict[int, int]
    counters: int
    #: Original instruction index -> where its line record goes now (the counter
    #: opening its block, or the instruction itself).
    record_at: tuple[int, ...]
    #: Counters that spill registers (no two were free where they count).
    spilled: int = 0

    def function_starts(self, starts: Sequence[int]) -> list[int]:
        """Where the functions starting at `starts` (original indices) start now."""
        return [self.record_at[s] for s in starts]


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhI", code, (src << 4) | dst, off, imm & 0xFFFFFFFF)


def _uses_defs(ins: Insn) -> tuple[frozenset[int], frozenset[int]]:
    """Registers an instruction reads and writes; calls read r1-r5 and write r0-r5."""
    cls, op, mode, x = ins.code & 7, ins.code & 0xF0, ins.code & 0xE0, bool(ins.code & 0x08)
    if ins.code == LD_IMM64:
        return frozenset(), frozenset({ins.dst})
    if cls == 0:  # LD_ABS / LD_IND: the context in r6, clobbers the caller-saved
        return frozenset({6} | ({ins.src} if mode == 0x40 else set())), _CALLER_SAVED
    if cls == 1:
        return frozenset({ins.src}), frozenset({ins.dst})
    if cls == 2:
        return frozenset({ins.dst}), frozenset()
    if cls == 3:
        if mode == 0xC0:  # atomics: FETCH writes src; CMPXCHG reads and writes r0
            if ins.imm == 0xF1:
                return frozenset({ins.dst, ins.src, 0}), frozenset({0})
            return frozenset({ins.dst, ins.src}), frozenset({ins.src} if ins.imm & 1 else ())
        return frozenset({ins.dst, ins.src}), frozenset()
    if cls in (4, 7):
        if op == 0xB0:  # MOV
            return frozenset({ins.src} if x else ()), frozenset({ins.dst})
        reads = {ins.dst} | ({ins.src} if x and op not in (0x80, 0xD0) else set())
        return frozenset(reads), frozenset({ins.dst})
    if op == OP_CALL:
        return _ARGS, _CALLER_SAVED
    if op == OP_EXIT:
        return frozenset({0}), frozenset()
    if op == OP_JA:
        return frozenset(), frozenset()
    return frozenset({ins.dst} | ({ins.src} if x else set())), frozenset()


def _block_successors(flow: ControlFlow) -> list[list[int]]:
    out = []
    for blk in flow.blocks:
        last = _last(flow, blk.start, blk.end)
        nxt = [
            flow.block_of[j]
            for j in successors(flow.insns[last], last)
            if 0 <= j < len(flow.insns) and flow.block_of[j] >= 0
        ]
        out.append([b for b in nxt if flow.blocks[b].function == blk.function])
    return out


def _last(flow: ControlFlow, start: int, end: int) -> int:
    """A block's last instruction (not the second slot of a 64-bit load)."""
    return max(i for i in range(start, end) if flow.block_of[i] >= 0)


def _live_in(flow: ControlFlow) -> list[frozenset[int]]:
    """Registers live at each block's first instruction (backward data flow)."""
    succ = _block_successors(flow)
    live: list[frozenset[int]] = [frozenset()] * len(flow.blocks)
    changed = True
    while changed:
        changed = False
        for b in reversed(range(len(flow.blocks))):
            blk = flow.blocks[b]
            regs = frozenset().union(*(live[s] for s in succ[b]))
            for i in reversed(range(blk.start, blk.end)):
                if flow.block_of[i] < 0:  # the second slot of a 64-bit load
                    continue
                uses, defs = _uses_defs(flow.insns[i])
                regs = (regs - defs) | uses
            if regs != live[b]:
                live[b], changed = regs, True
    return live


#: Registers set at a function's entry as the verifier sees them: the context in r1
#: of the main function, the frame pointer everywhere (a subprogram's or callback's
#: arguments may be unset: its caller's business).
_MAIN_ENTRY, _SUB_ENTRY = frozenset({1, _FP}), frozenset({_FP})
_ALL = frozenset(range(11))


def _set_in(flow: ControlFlow) -> list[frozenset[int]]:
    """Registers set on every path to each block's first instruction (forward data
    flow). A call or a packet load leaves r1-r5 unset (the verifier marks them so),
    so a register a later call only seems to read (a helper of fewer arguments) is
    not one a counter may spill: spilling an unset register is refused."""
    succ = _block_successors(flow)
    entries = {e: (_MAIN_ENTRY if k == 0 else _SUB_ENTRY) for k, e in enumerate(flow.entries)}
    set_in: list[frozenset[int]] = [entries.get(b, _ALL) for b in range(len(flow.blocks))]
    changed = True
    while changed:
        changed = False
        for b, blk in enumerate(flow.blocks):
            regs = set_in[b]
            for i in range(blk.start, blk.end):
                if flow.block_of[i] < 0:
                    continue
                ins = flow.insns[i]
                uses, defs = _uses_defs(ins)
                if defs == _CALLER_SAVED:  # a call, a packet load: r1-r5 unset after it
                    regs = (regs - _ARGS) | {0}
                else:
                    regs = regs | defs
            for s in succ[b]:
                meet = set_in[s] & regs
                if meet != set_in[s]:
                    set_in[s], changed = meet, True
    return set_in


def _stack_depth(flow: ControlFlow) -> int:
    """The deepest stack offset any instruction may reach (a negative multiple of 8):
    frame-pointer offsets, and any negative constant added to a register (a pointer
    made from r10 and moved: counted whatever register it is in)."""
    deepest = 0
    for i, ins in enumerate(flow.insns):
        if i and flow.insns[i - 1].code == LD_IMM64 and flow.block_of[i] < 0:
            continue
        if _FP in (ins.dst, ins.src) and ins.off < 0:
            deepest = min(deepest, ins.off)
        if ins.code == _ADD64_K and -_MAX_STACK <= ins.imm < 0:
            deepest = min(deepest, ins.imm)
    return (deepest // 8) * 8


def _is_conditional(ins: Insn) -> bool:
    cls, op = ins.code & 7, ins.code & 0xF0
    return cls in (CLASS_JMP, CLASS_JMP32) and op not in (OP_JA, OP_CALL, OP_EXIT)


def instrument(insns: bytes, flow: ControlFlow, map_fd: int) -> Instrumented:
    """`insns` (whose control flow is `flow`, with every function start; worked out
    from the same code, its 64-bit loads' values aside) with a counter in map
    `map_fd`'s value at each block start and each conditional jump's fall-through.
    Raises InstrumentError when a jump would no longer reach."""
    decoded = decode_insns(insns)  # not flow.insns: its 64-bit loads may be zeroed
    live, is_set = _live_in(flow), _set_in(flow)
    slot = _stack_depth(flow) - 16  # two spill slots below anything the program uses
    counters = spilled = 0
    block_counters = [-1] * len(flow.blocks)
    fall_counters: dict[int, int] = {}
    before: dict[int, list[bytes]] = {}  # instruction -> code put before it
    opens: dict[int, int] = {}  # instruction -> where its block's counter starts (in slots)

    def count(at: int, counter: int, block: int) -> list[bytes]:
        nonlocal spilled
        free = [r for r in range(10) if r not in live[block]][:2]
        spill = [r for r in range(1, 10) if r not in free and r in is_set[block]]
        spill = spill[: 2 - len(free)]
        if len(free) + len(spill) < 2:
            raise InstrumentError("no register to count with at one of its blocks")
        a, c = (free + spill)[:2]
        spilled += bool(spill)
        if spill and slot < -_MAX_STACK:
            raise InstrumentError(
                f"no stack left to spill registers into (it uses {-slot - 16} of 512 bytes)"
            )
        seq = [_insn(_STX_DW, _FP, r, slot + 8 * k) for k, r in enumerate(spill)]
        seq += [_insn(LD_IMM64, a, PSEUDO_MAP_VALUE, 0, map_fd), _insn(0, imm=8 * counter)]
        seq += [_insn(_MOV64_K, c, imm=1), _insn(_ATOMIC_ADD64, a, c)]
        seq += [_insn(_LDX_DW, r, _FP, slot + 8 * k) for k, r in enumerate(spill)]
        return seq

    for b, blk in enumerate(flow.blocks):
        last = _last(flow, blk.start, blk.end)
        nxt = last + 1
        if _is_conditional(decoded[last]) and nxt < len(decoded) and flow.block_of[nxt] >= 0:
            fall_counters[b] = counters
            before.setdefault(nxt, []).extend(count(nxt, counters, flow.block_of[nxt]))
            counters += 1
    for b, blk in enumerate(flow.blocks):
        seq = before.setdefault(blk.start, [])
        opens[blk.start] = len(seq)
        block_counters[b] = counters
        seq.extend(count(blk.start, counters, b))
        counters += 1
    # New positions: where each instruction is, and where a jump to it lands.
    pos, land = [], []
    at = 0
    for i in range(len(decoded) + 1):
        seq = before.get(i, [])
        land.append(at + opens.get(i, len(seq)))
        at += len(seq)
        pos.append(at)
        at += 1
    out = bytearray()
    for i, ins in enumerate(decoded):
        out += b"".join(before.get(i, ()))
        raw = bytearray(insns[8 * i : 8 * i + 8])
        second_slot = i and decoded[i - 1].code == LD_IMM64 and flow.block_of[i] < 0
        cls, op = ins.code & 7, ins.code & 0xF0
        if second_slot:
            pass
        elif cls == CLASS_JMP32 and op == OP_JA:
            raw[4:8] = struct.pack("<i", land[i + 1 + ins.imm] - pos[i] - 1)
        elif cls in (CLASS_JMP, CLASS_JMP32) and op not in (OP_CALL, OP_EXIT):
            off = land[i + 1 + ins.off] - pos[i] - 1
            if not -(1 << 15) <= off < 1 << 15:
                raise InstrumentError(f"a jump at instruction {i} no longer reaches with counters")
            raw[2:4] = struct.pack("<h", off)
        elif (ins.code == CALL and ins.src == PSEUDO_CALL) or (
            ins.code == LD_IMM64 and ins.src == PSEUDO_FUNC
        ):
            raw[4:8] = struct.pack("<i", land[i + 1 + ins.imm] - pos[i] - 1)
        out += raw
    record_at = tuple(land[i] if i in opens else pos[i] for i in range(len(decoded)))
    return Instrumented(
        bytes(out), tuple(block_counters), fall_counters, counters, record_at, spilled
    )
