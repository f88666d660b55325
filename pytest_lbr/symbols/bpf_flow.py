"""Which calls of a BPF program must have run before another (pure: no kernel access).

Some helpers leave no record the function tracer can make: `bpf_get_current_task`
is notrace (kernel/trace/ is built without -pg) and calls nothing that is
traced, and a kprobe event on it cannot be defined (the write to kprobe_events
fails in the 6.12 guest, as for every function missing from
available_filter_functions; trace_kprobe.c refuses notrace functions without
CONFIG_KPROBE_EVENTS_ON_NOTRACE).
Its call can still be proven: where a call site *dominates* a recorded one in
the program's control flow (every path from the entry to the recorded call goes
through it), it ran in that run. `call_dominators` computes that from the
program's translated instructions; `jit_calls_match` ties the JIT image's call
instructions to those instructions, so a recorded call site (an address in the
image) names its translated call.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..kernel.helpers import decode_insns

__all__ = ["call_dominators", "jit_call_index", "main_calls"]

_CLASS_JMP, _CLASS_JMP32 = 0x05, 0x06
_OP_JA, _OP_CALL, _OP_EXIT = 0x00, 0x80, 0x90
_BPF_LD_IMM64 = 0x18
_TAIL_CALL = 12  # BPF_FUNC_tail_call: how a translated dump shows a tail call


def _successors(code: int, off: int, imm: int, i: int) -> list[int]:
    """Where control goes after instruction `i` (BPF ISA: jumps are relative to i + 1)."""
    if code == _BPF_LD_IMM64:
        return [i + 2]  # two instruction slots
    cls, op = code & 0x07, code & 0xF0
    if cls not in (_CLASS_JMP, _CLASS_JMP32) or op == _OP_CALL:
        return [i + 1]  # a call returns (a tail call that jumps never comes back: fine
        # for "ran before", which only asks what every path went through)
    if op == _OP_EXIT:
        return []
    if op == _OP_JA:  # JMP32 | JA (gotol) takes its offset from imm
        return [i + 1 + (imm if cls == _CLASS_JMP32 else off)]
    return [i + 1, i + 1 + off]


def main_calls(xlated: bytes) -> list[int]:
    """Indexes of the call instructions reachable from the entry without a call
    (the main function's own calls), in instruction order."""
    insns = decode_insns(xlated)
    seen, todo = set(), [0]
    while todo:
        i = todo.pop()
        if i in seen or not 0 <= i < len(insns):
            continue
        seen.add(i)
        ins = insns[i]
        todo.extend(_successors(ins.code, ins.off, ins.imm, i))
    return [i for i in sorted(seen) if insns[i].code == _CLASS_JMP | _OP_CALL]


def call_dominators(xlated: bytes) -> dict[int, frozenset[int]]:
    """Call instruction index -> the call instructions that ran before it on every
    path from the program's entry (its main function; subprograms are entered by
    calls and are not followed)."""
    insns = decode_insns(xlated)
    n = len(insns)
    succ: dict[int, list[int]] = {}
    order: list[int] = []
    todo, seen = [0], set()
    while todo:  # reachable instructions
        i = todo.pop()
        if i in seen or not 0 <= i < n:
            continue
        seen.add(i)
        order.append(i)
        ins = insns[i]
        succ[i] = [j for j in _successors(ins.code, ins.off, ins.imm, i) if 0 <= j < n]
        todo.extend(succ[i])
    preds: dict[int, list[int]] = {i: [] for i in seen}
    for i, js in succ.items():
        for j in js:
            preds[j].append(i)
    everything = (1 << n) - 1
    dom = {i: everything for i in seen}
    dom[0] = 1
    ordered = sorted(seen)
    changed = True
    while changed:  # the classic iterative data flow, on bit sets
        changed = False
        for i in ordered:
            if i == 0:
                continue
            new = everything
            for p in preds[i]:
                new &= dom[p]
            new |= 1 << i
            if new != dom[i]:
                dom[i], changed = new, True
    calls = [i for i in ordered if insns[i].code == _CLASS_JMP | _OP_CALL]
    return {c: frozenset(d for d in calls if d != c and dom[c] >> d & 1) for c in calls}


def jit_call_index(xlated: bytes, call_base: int, jit_targets: Sequence[int]) -> list[int] | None:
    """The translated call instruction of each of the main function's JIT call
    instructions (given by their targets, in order), or None where they do not
    pair one for one. The JIT emits one call instruction per BPF call but a tail
    call (a jump); a helper call's target is `call_base + imm` in both, which is
    checked. Kfunc and subprogram calls pair by position."""
    insns = decode_insns(xlated)
    calls = [
        k for k in main_calls(xlated) if not (insns[k].src == 0 and insns[k].imm == _TAIL_CALL)
    ]
    if len(calls) != len(jit_targets):
        return None
    for k, target in zip(calls, jit_targets, strict=True):
        if insns[k].src == 0 and call_base + insns[k].imm != target:
            return None
    return calls
