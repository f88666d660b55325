"""What a BPF instruction is (`bytecode.instructions`), on the translated
instructions the 6.1 and 6.12 guests gave for the examples' programs
(tests/data/helpers-*.json) and on instructions written out here."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pytest_lbr.bytecode.instructions import (
    CALL,
    FUNC_TAIL_CALL,
    LD_IMM64,
    PSEUDO_CALL,
    Insn,
    decode_insns,
    ends_block,
    helper_call_ids,
    is_call,
    is_jit_call,
    is_tail_call,
    successors,
    xlated_calls,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def _guest(kernel: str) -> tuple[int, dict[str, bytes]]:
    d = json.loads((DATA / f"helpers-{kernel}.json").read_text())
    return d["call_base"], {p["name"]: bytes.fromhex(p["xlated"]) for p in d["programs"]}


def _raw(*insns: tuple[int, int, int, int, int]) -> bytes:
    """Instructions as (code, dst, src, off, imm), little-endian as the kernel has them."""
    return b"".join(struct.pack("<BBhi", c, d | s << 4, o, i) for c, d, s, o, i in insns)


def test_a_dump_decodes_to_its_instructions_and_round_trips() -> None:
    raw = _raw((0xB7, 0, 0, 0, 2), (LD_IMM64, 1, 1, 0, 5), (0, 0, 0, 0, 0), (0x95, 0, 0, 0, 0))
    assert decode_insns(raw) == (
        Insn(0xB7, 0, 0, 0, 2),
        Insn(LD_IMM64, 1, 1, 0, 5),
        Insn(0, 0, 0, 0, 0),
        Insn(0x95, 0, 0, 0, 0),
    )
    assert decode_insns(raw + b"\x01\x02\x03") == decode_insns(raw)  # a torn tail is dropped
    for kernel in ("6.1", "6.12"):
        for code in _guest(kernel)[1].values():
            insns = decode_insns(code)
            assert len(insns) == len(code) // 8
            assert _raw(*((i.code, i.dst, i.src, i.off, i.imm) for i in insns)) == code


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_the_entry_program_s_calls_are_told_apart(kernel: str) -> None:
    # tail_loop's entry: bpf_loop (inlined by both kernels into a loop calling its
    # callback: subprogram calls), a helper, and a tail call into stage2.
    base, code = _guest(kernel)
    insns = decode_insns(code["entry"])
    tails = [k for k, i in enumerate(insns) if is_tail_call(i)]
    subprograms = [k for k, i in enumerate(insns) if is_call(i) and i.src == PSEUDO_CALL]
    assert len(tails) == 1 and subprograms
    assert all(ends_block(insns[k]) for k in tails)
    assert not any(ends_block(insns[k]) or is_jit_call(insns[k]) for k in subprograms)
    calls = xlated_calls(code["entry"], base)
    assert [c.index for c in calls if c.tail_call] == tails
    assert all(c.addr == base + insns[c.index].imm for c in calls if not c.tail_call)
    assert helper_call_ids(code["entry"]).count(FUNC_TAIL_CALL) == 1


def test_successors_of_jumps_calls_exits_and_wide_loads() -> None:
    jeq = Insn(0x15, 1, 0, 3, 0)  # if r1 == 0 goto +3
    gotol = Insn(0x06, 0, 0, 0, -2)  # JMP32 | JA: the offset is in imm
    assert successors(jeq, 10) == [11, 14]
    assert successors(Insn(0x05, 0, 0, 4, 0), 10) == [15]
    assert successors(gotol, 10) == [9]
    assert successors(Insn(CALL, 0, 0, 0, 1), 10) == [11]  # a call returns
    assert successors(Insn(0x95, 0, 0, 0, 0), 10) == []
    assert successors(Insn(LD_IMM64, 1, 0, 0, 0), 10) == [12]
    assert ends_block(jeq) and ends_block(gotol) and not ends_block(Insn(CALL, 0, 0, 0, 1))
