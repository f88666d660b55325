"""BPF instructions: decoding, opcodes and what each instruction is.

The encoding is the BPF ISA's (Documentation/bpf/standard/instruction-set.rst):
8 bytes, `code` (class in the low 3 bits, operation in the high 4), the two
registers in one byte, a 16-bit offset and a 32-bit immediate. A 64-bit load
(`BPF_LD | BPF_IMM | BPF_DW`) takes two slots. Translated dumps
(BPF_OBJ_GET_INFO_BY_FD's xlated_prog_insns) leave, for root, each helper call's
`imm` as `func - __bpf_call_base` and a tail call as a call of
BPF_FUNC_tail_call (kernel/bpf/syscall.c, bpf_insn_prepare_dump).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

__all__ = [
    "CALL",
    "FUNC_TAIL_CALL",
    "LD_IMM64",
    "PSEUDO_CALL",
    "PSEUDO_FUNC",
    "PSEUDO_KFUNC_CALL",
    "PSEUDO_MAP_FD",
    "PSEUDO_MAP_VALUE",
    "Insn",
    "XlatedCall",
    "decode_insns",
    "ends_block",
    "function_starts",
    "helper_call_ids",
    "is_call",
    "is_jit_call",
    "is_tail_call",
    "successors",
    "xlated_calls",
]

CLASS_JMP, CLASS_JMP32 = 0x05, 0x06
OP_JA, OP_CALL, OP_EXIT = 0x00, 0x80, 0x90
#: BPF_JMP | BPF_CALL.
CALL = CLASS_JMP | OP_CALL
#: BPF_LD | BPF_IMM | BPF_DW: a 64-bit load, two instruction slots.
LD_IMM64 = 0x18
#: src_reg of a call: into a subprogram of the same program; of a kfunc.
PSEUDO_CALL, PSEUDO_KFUNC_CALL = 1, 2
#: src_reg of a 64-bit load: a map's fd; a map value's address (imm the map's fd, the
#: second slot's imm the offset in its value).
PSEUDO_MAP_FD, PSEUDO_MAP_VALUE = 1, 2
#: src_reg of a 64-bit load: the address of a function of this program (a callback).
PSEUDO_FUNC = 4
#: BPF_FUNC_tail_call in uapi linux/bpf.h (stable ABI since Linux 4.2).
FUNC_TAIL_CALL = 12
#: Above every helper id (__BPF_FUNC_MAX_ID is 212 in v6.12).
_MAX_HELPER_ID = 1024


@dataclass(frozen=True)
class Insn:
    """One 8-byte BPF instruction."""

    code: int
    dst: int
    src: int
    off: int
    imm: int

    @property
    def is_helper_call(self) -> bool:
        """A call of a helper (or, in a translated dump, of a kernel function)."""
        return self.code == CALL and self.src == 0


@functools.lru_cache(maxsize=64)
def decode_insns(raw: bytes) -> tuple[Insn, ...]:
    """BPF instructions (little-endian) from their bytes. Kept for the last few
    programs: describing a new one (its calls, callbacks, flow, call index) decodes
    its translation several times."""
    return tuple(
        Insn(code, regs & 0xF, regs >> 4, off, imm)
        for code, regs, off, imm in struct.iter_unpack("<BBhi", raw[: len(raw) // 8 * 8])
    )


def is_call(ins: Insn) -> bool:
    """A BPF call instruction (helper, kfunc, subprogram, tail call)."""
    return ins.code == CALL


def is_tail_call(ins: Insn) -> bool:
    """A tail call as a dump shows it: a call of BPF_FUNC_tail_call."""
    return ins.code == CALL and ins.src == 0 and ins.imm == FUNC_TAIL_CALL


def is_jit_call(ins: Insn) -> bool:
    """A call the JIT emits as a call of kernel code (a helper or kfunc), which the
    function tracer can record: not a tail call (a jump) nor a subprogram call."""
    return ins.code == CALL and not is_tail_call(ins) and ins.src != PSEUDO_CALL


def successors(ins: Insn, i: int) -> list[int]:
    """Where control goes after instruction `i` (jumps are relative to i + 1). A call
    returns; a tail call that jumps does not, which `ends_block` accounts for."""
    if ins.code == LD_IMM64:
        return [i + 2]
    cls, op = ins.code & 0x07, ins.code & 0xF0
    if cls not in (CLASS_JMP, CLASS_JMP32) or op == OP_CALL:
        return [i + 1]
    if op == OP_EXIT:
        return []
    if op == OP_JA:  # JMP32 | JA (gotol) takes its offset from imm
        return [i + 1 + (ins.imm if cls == CLASS_JMP32 else ins.off)]
    return [i + 1, i + 1 + ins.off]


def ends_block(ins: Insn) -> bool:
    """A jump, an exit, or a tail call: the instruction after it may not run once
    this one did (a tail call that succeeds does not come back)."""
    cls, op = ins.code & 0x07, ins.code & 0xF0
    return (cls in (CLASS_JMP, CLASS_JMP32) and op != OP_CALL) or is_tail_call(ins)


def function_starts(raw: bytes) -> list[int]:
    """Where an object's functions start, in order: the main one (0) and every target
    of a subprogram call or of a function address load (`ld_imm64` with
    BPF_PSEUDO_FUNC): the order the kernel's func_info lists them."""
    starts = {0}
    for i, ins in enumerate(decode_insns(raw)):
        if (ins.code == CALL and ins.src == PSEUDO_CALL) or (
            ins.code == LD_IMM64 and ins.src == PSEUDO_FUNC
        ):
            starts.add(i + 1 + ins.imm)
    return sorted(starts)


def helper_call_ids(raw: bytes) -> list[int]:
    """The helper ids an object's instructions call, in order (subprograms appended
    by libbpf included): what the BPF C source wrote."""
    return [i.imm for i in decode_insns(raw) if i.is_helper_call]


@dataclass(frozen=True)
class XlatedCall:
    """A helper call left in a program's translated instructions."""

    #: Instruction index in the translated program.
    index: int
    #: True for a tail call (dumped as a call of BPF_FUNC_tail_call).
    tail_call: bool
    #: The called kernel function's address (`__bpf_call_base + imm`); 0 for a tail call.
    addr: int
    #: The `imm` when it may be a helper id the verifier left for the JIT to inline:
    #: a JIT that inlines a helper itself (bpf_jit_inlines_helper_call(),
    #: kernel/bpf/core.c; arm64's for bpf_get_smp_processor_id) keeps the call's `imm`
    #: the helper's id, not an offset from `__bpf_call_base` (do_misc_fixups skips
    #: it). None for a larger `imm`.
    helper_id: int | None = None


def xlated_calls(raw: bytes, call_base: int) -> list[XlatedCall]:
    """The helper calls of translated instructions `raw`, in order.

    `call_base` is the address of `__bpf_call_base`. Without root the kernel
    zeroes every `imm` (bpf_dump_raw_ok): then each address is `call_base`.
    """
    out = []
    for i, insn in enumerate(decode_insns(raw)):
        if not insn.is_helper_call:
            continue
        if insn.imm == FUNC_TAIL_CALL:
            out.append(XlatedCall(i, True, 0))
        else:
            small = insn.imm if 0 < insn.imm < _MAX_HELPER_ID else None
            out.append(XlatedCall(i, False, call_base + insn.imm, small))
    return out
