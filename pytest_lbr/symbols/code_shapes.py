"""x86-64 code decoded once per shape: the same BPF program loaded again.

Most suites load their program per test, and every trace of a newly loaded program
decodes its JIT image (its call sites, its calls' flow). The JIT emits the same
bytes for the same translated program except in a few immediates: a `call rel32` /
`jmp rel32` out of the image (to a helper, a kfunc, a tail-called program), a
`movabs` of a 64-bit constant (a map's address, new at each load) and a `mov` of
a sign-extended 32-bit one (a trampoline's program, in the top 2 GiB). Code whose
bytes differ from code decoded before only inside such fields is, instruction for
instruction, the same code: immediates do not change an instruction's length. Its
instructions are taken from the earlier decoding, and only the texts that depend
on the address or on those fields are made anew.

Each such text is made the way capstone writes it, and checked against capstone
when the shape is first decoded: an instruction whose text this module would not
write exactly as capstone did is decoded again by capstone every time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import capstone

__all__ = ["decode", "shapes_kept"]

#: (address, size, mnemonic, operands): what `Cs.disasm_lite` yields.
Decoded = tuple[int, int, str, str]

#: How a text is made anew at another address.
_AS_IS, _BRANCH, _IMMEDIATE, _CAPSTONE = range(4)
#: Shapes kept: a long session loads many programs, each a few functions.
_MAX_SHAPES = 256
#: Below this, decoding is as cheap as matching a shape.
_MIN_SIZE = 64
#: Above this, code is decoded but no shape is kept: making one costs about a second
#: decoding, paid again for code that changes between traces (ftrace's trampolines).
_MAX_SIZE = 16 << 10


@dataclass(frozen=True)
class _Insn:
    offset: int
    size: int
    mnemonic: str
    operands: str
    #: _AS_IS, _BRANCH (a relative jump or call: a target), _IMMEDIATE (a
    #: register loaded with a constant) or _CAPSTONE (decoded anew).
    how: int
    #: For _BRANCH and _IMMEDIATE: where its displacement or value starts, and
    #: its size in bytes.
    field: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class _Shape:
    """One decoded code, and which of its bytes may differ in the same code elsewhere."""

    insns: tuple[_Insn, ...]
    #: [start, end) of the fields that may differ: external rel32, imm64.
    fields: tuple[tuple[int, int], ...]
    #: The code with those fields zeroed.
    masked: bytes
    #: Instructions of some mnemonics only (`of`).
    kept: dict[frozenset[str], tuple[_Insn, ...]] = field(default_factory=dict, compare=False)

    def of(self, mnemonics: frozenset[str]) -> tuple[_Insn, ...]:
        """Its instructions of these mnemonics (a call-site search wants calls and jumps)."""
        kept = self.kept.get(mnemonics)
        if kept is None:
            kept = self.kept[mnemonics] = tuple(i for i in self.insns if i.mnemonic in mnemonics)
        return kept

    def matches(self, code: bytes) -> bool:
        return _masked(code, self.fields) == self.masked

    def at(
        self, code: bytes, addr: int, md: capstone.Cs, only: frozenset[str] | None
    ) -> list[Decoded]:
        out: list[Decoded] = []
        insns = self.insns if only is None else self.of(only)
        for i in insns:
            at = addr + i.offset
            if i.how == _AS_IS:
                out.append((at, i.size, i.mnemonic, i.operands))
                continue
            text = None
            if i.how == _BRANCH:
                text = _target_text(code, at, i)
            elif i.how == _IMMEDIATE:
                text = _immediate_text(code, i)
            # A value of one hex digit: capstone writes up to 9 in decimal, so let it.
            if text is not None and len(text.rpartition(" ")[2]) > len("0x0"):
                out.append((at, i.size, i.mnemonic, text))
            else:
                out.extend(md.disasm_lite(code[i.offset : i.offset + i.size], at))
        return out


def decode(
    code: bytes, addr: int, md: capstone.Cs, only: frozenset[str] | None = None
) -> list[Decoded]:
    """`md.disasm_lite(code, addr)` as a list, from a shape decoded before where
    one matches (`md`: an x86-64 decoder). With `only`, instructions of other
    mnemonics may be left out."""
    if not _MIN_SIZE <= len(code) <= _MAX_SIZE:
        return list(md.disasm_lite(code, addr))
    for shape in _shapes.get(len(code), ()):
        if shape.matches(code):
            return shape.at(code, addr, md, only)
    decoded = list(md.disasm_lite(code, addr))
    _keep(len(code), _shape_of(code, addr, decoded))
    return decoded


def shapes_kept() -> int:
    """How many decoded shapes the process keeps (for tests: code decoded again
    elsewhere is matched, not kept anew)."""
    return sum(len(s) for s in _shapes.values())


def _keep(size: int, shape: _Shape) -> None:
    # Sizes in the order last kept (the oldest goes first), each size's shapes
    # newest first.
    same_size = _shapes.pop(size, [])
    _shapes[size] = [shape, *same_size[:3]]
    while shapes_kept() > _MAX_SHAPES:
        del _shapes[next(iter(_shapes))]


#: Code size -> shapes of that size, the newest first.
_shapes: dict[int, list[_Shape]] = {}


def _shape_of(code: bytes, addr: int, decoded: Iterable[Decoded]) -> _Shape:
    insns: list[_Insn] = []
    fields: list[tuple[int, int]] = []
    for at, size, mnemonic, operands in decoded:
        off = at - addr
        raw = code[off : off + size]
        insn = _Insn(off, size, mnemonic, operands, _AS_IS)
        branch = _branch_field(raw)
        if branch is not None:
            insn = _Insn(off, size, mnemonic, operands, _BRANCH, (off + branch[0], branch[1]))
            if _target_text(code, at, insn) != operands:
                insn = _Insn(off, size, mnemonic, operands, _CAPSTONE)
            if raw[0] in (0xE8, 0xE9) and size == 5:  # may leave the image: may differ
                fields.append((off + 1, off + 5))
        elif (value := _immediate_field(raw, mnemonic)) is not None:
            span = (off + value[0], value[1])
            insn = _Insn(off, size, mnemonic, operands, _IMMEDIATE, span)
            if _immediate_text(code, insn) != operands:  # checked as capstone wrote it
                insn = _Insn(off, size, mnemonic, operands, _CAPSTONE)
            fields.append((span[0], span[0] + span[1]))
        elif mnemonic.startswith(("j", "call", "loop")):
            # Some other branch (indirect, prefixed): its text may name an address.
            insn = _Insn(off, size, mnemonic, operands, _CAPSTONE)
        insns.append(insn)
    return _Shape(tuple(insns), tuple(fields), _masked(code, fields))


def _branch_field(raw: bytes) -> tuple[int, int] | None:
    """(offset, size) of the displacement of a relative jump or call without
    prefixes: call/jmp rel32, jmp/jcc/loop/jrcxz rel8, jcc rel32."""
    op = raw[0]
    if op in (0xE8, 0xE9) and len(raw) == 5:
        return 1, 4
    if (op == 0xEB or 0x70 <= op <= 0x7F or 0xE0 <= op <= 0xE3) and len(raw) == 2:
        return 1, 1
    if op == 0x0F and len(raw) == 6 and 0x80 <= raw[1] <= 0x8F:
        return 2, 4
    return None


def _immediate_field(raw: bytes, mnemonic: str) -> tuple[int, int] | None:
    """(offset, size) of the value of `movabs r64, imm64` (REX.W, B8+r, imm64) or
    `mov r64, simm32` (REX.W, C7, a register's ModRM, imm32)."""
    if len(raw) < 7 or raw[0] & 0xF8 != 0x48:
        return None
    if mnemonic == "movabs" and len(raw) == 10 and 0xB8 <= raw[1] <= 0xBF:
        return 2, 8
    if mnemonic == "mov" and len(raw) == 7 and raw[1] == 0xC7 and raw[2] & 0xF8 == 0xC0:
        return 3, 4
    return None


def _target_text(code: bytes, at: int, insn: _Insn) -> str:
    start, size = insn.field
    disp = int.from_bytes(code[start : start + size], "little", signed=True)
    return f"{(at + insn.size + disp) & 0xFFFF_FFFF_FFFF_FFFF:#x}"


def _immediate_text(code: bytes, insn: _Insn) -> str:
    register = insn.operands.split(",", 1)[0]
    start, size = insn.field
    value = int.from_bytes(code[start : start + size], "little", signed=True)
    return f"{register}, {value & 0xFFFF_FFFF_FFFF_FFFF:#x}"


def _masked(code: bytes, fields: Iterable[tuple[int, int]]) -> bytes:
    out = bytearray(code)
    for start, end in fields:
        out[start:end] = bytes(end - start)
    return bytes(out)
