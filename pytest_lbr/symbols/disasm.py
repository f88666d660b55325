"""Disassembly with capstone of kernel text and JITed BPF images, annotated with source lines.

Code bytes come from the debug vmlinux (ELF addresses, KASLR removed), from
/proc/kcore (the live kernel, root only), or from a BPF program's
jited_prog_insns. `instruction_at` gives the instruction at a branch's `from`
address, which is what `pytest-lbr trace --disasm` prints.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import capstone

from ..bpf.libbpf import lib
from ..model import Location
from ..programs.lines import jited_image
from . import code_shapes

if TYPE_CHECKING:
    from . import Symbolizer

__all__ = [
    "Instruction",
    "KcoreReader",
    "VmlinuxText",
    "annotate",
    "branch_instruction",
    "call_targets",
    "disassemble",
    "disassemble_function",
    "function_code",
    "jumps_out",
    "format_listing",
    "instruction_at",
    "read_kernel",
]

_ARCHES = {
    "x86_64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    "EM_X86_64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    "arm64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
    "aarch64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
    "EM_AARCH64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
}


class Instruction(NamedTuple):
    """One decoded instruction, with its source location when known.

    A named tuple, not a dataclass: call-site searches decode whole functions,
    and a tuple is the cheapest immutable record Python builds."""

    addr: int
    size: int
    mnemonic: str
    operands: str
    raw: bytes
    location: Location | None = None

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()

    def __str__(self) -> str:
        return f"{self.addr:#x}: {self.raw.hex(' '):<30} {self.text}"


def disassemble(
    code: bytes,
    addr: int,
    arch: str = "x86_64",
    only: frozenset[str] | None = None,
    *,
    jit: bool = False,
) -> list[Instruction]:
    """Decode `code` loaded at `addr`; stops at the first undecodable byte. With
    `only`, just the instructions of those mnemonics are kept. `jit`: a BPF JIT
    image, which the same program loaded again repeats elsewhere (`code_shapes`)."""
    md = _decoder(arch)
    # disasm_lite: plain tuples, no per-instruction detail objects (the full
    # objects cost about twice as much, and call-site searches decode whole functions).
    # x86-64 code decoded before at another address (a program loaded again) is
    # taken from that decoding (`code_shapes`).
    shaped = jit and md.arch == capstone.CS_ARCH_X86
    decoded = code_shapes.decode(code, addr, md, only) if shaped else None
    return [
        Instruction(at, size, mnemonic, operands, code[at - addr : at - addr + size])
        for at, size, mnemonic, operands in (decoded or md.disasm_lite(code, addr))
        if only is None or mnemonic in only
    ]


def _decoder(arch: str) -> capstone.Cs:
    """The thread's capstone decoder for `arch`: made once (making one imports
    capstone's architecture module again, a few ms a call under emulation)."""
    decoders: dict[str, capstone.Cs] = _decoders.__dict__.setdefault("by_arch", {})
    md = decoders.get(arch)
    if md is None:
        try:
            cs_arch, cs_mode = _ARCHES[arch]
        except KeyError:
            raise ValueError(f"no disassembler for architecture {arch!r}") from None
        md = decoders[arch] = capstone.Cs(cs_arch, cs_mode)
    return md


#: Per thread (a live trace decodes in its own): a decoder is not shared.
_decoders = threading.local()


def call_targets(insns: Sequence[Instruction], arch: str = "x86_64") -> list[tuple[int, int]]:
    """(address, target) of every call among `insns` whose target the code itself states.

    x86-64: `call <address>`. arm64: `bl <address>`, and `blr xN` after the `mov`/`movk`
    sequence that builds xN (how the arm64 BPF JIT calls a helper). Calls through a
    register or memory whose value the code does not state are left out.
    """
    out: list[tuple[int, int]] = []
    if _ARCHES.get(arch, (None,))[0] == capstone.CS_ARCH_X86:
        for i in insns:
            if i.mnemonic == "call" and i.operands.startswith("0x"):
                out.append((i.addr, int(i.operands, 16)))
        return out
    regs: dict[str, int] = {}  # arm64 registers whose value mov/movk stated
    for i in insns:
        ops = [o.strip() for o in i.operands.split(",")]
        if i.mnemonic == "bl" and ops[0].startswith("#"):
            out.append((i.addr, int(ops[0][1:], 16)))
        elif i.mnemonic == "blr" and ops[0] in regs:
            out.append((i.addr, regs[ops[0]]))
        elif i.mnemonic == "mov" and len(ops) == 2 and ops[1].startswith("#"):
            regs[ops[0]] = int(ops[1][1:], 0) & (1 << 64) - 1
        elif i.mnemonic == "movk" and ops[0] in regs and ops[1].startswith("#"):
            shift = int(ops[2].removeprefix("lsl #"), 0) if len(ops) > 2 else 0
            keep = regs[ops[0]] & ~(0xFFFF << shift)
            regs[ops[0]] = keep | int(ops[1][1:], 0) << shift
        elif ops and ops[0] in regs:
            del regs[ops[0]]  # anything else writing a register makes its value unknown
    return out


def jumps_out(insns: Sequence[Instruction], start: int, end: int) -> list[tuple[int, int]]:
    """(address, target) of every direct jump among `insns` out of [start, end): the
    last call of a function the compiler made a jump to another one (a tail call,
    `return __mod_timer(...)` in mod_timer). x86-64 `jmp`, arm64 `b`."""
    out: list[tuple[int, int]] = []
    for i in insns:
        if i.mnemonic in ("jmp", "b") and i.operands.startswith(("0x", "#0x")):
            target = int(i.operands.lstrip("#"), 16)
            if not start <= target < end:
                out.append((i.addr, target))
    return out


def annotate(
    insns: list[Instruction], locate_many: Callable[[list[int]], dict[int, Location]]
) -> list[Instruction]:
    """The same instructions with `location` filled by a symbolizer's locate_many."""
    locs = locate_many([i.addr for i in insns])
    return [
        Instruction(i.addr, i.size, i.mnemonic, i.operands, i.raw, locs.get(i.addr)) for i in insns
    ]


def format_listing(insns: list[Instruction]) -> str:
    """objdump -S style text: a source line header whenever file:line changes."""
    out: list[str] = []
    last: str | None = None
    for i in insns:
        loc = i.location
        if loc is not None:
            src = loc.source
            if src and src != last:
                out.append(f"; {src}" + (f"  [{loc.symbol}]" if loc.symbol else ""))
                last = src
        out.append(f"  {i}")
    return "\n".join(out)


def instruction_at(
    addr: int, function_start: int, read: Callable[[int, int], bytes], arch: str = "x86_64"
) -> Instruction | None:
    """The instruction starting at `addr` (e.g. a branch's `from`), decoding from the
    start of its function so that x86's variable-length code is split correctly."""
    if addr < function_start:
        return None
    # Enough bytes to reach addr and hold one more instruction (max 15 bytes on x86).
    code = read(function_start, addr - function_start + 16)
    for insn in disassemble(code, function_start, arch):
        if insn.addr == addr:
            return insn
        if insn.addr > addr:
            return None
    return None


class VmlinuxText:
    """Reads code bytes of a vmlinux ELF file at ELF (non-KASLR) addresses."""

    def __init__(self, path: str) -> None:
        from elftools.elf.elffile import ELFFile

        self.path = path
        with open(path, "rb") as f:
            elf = ELFFile(f)
            self.arch = elf["e_machine"]
            self._segs = [
                (s["p_vaddr"], s["p_filesz"], s["p_offset"])
                for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            ]

    def read(self, addr: int, size: int) -> bytes:
        """`size` bytes at ELF address `addr` (fewer at the end of a segment)."""
        return _read_segments(self.path, self._segs, addr, size)


class KcoreReader:
    """Reads live kernel text through /proc/kcore (root; absent under lockdown)."""

    def __init__(self, path: str = "/proc/kcore") -> None:
        self.path = path
        self._segs: list[tuple[int, int, int]] = []
        self._fd: int | None = None
        with open(path, "rb") as f:
            hdr = f.read(64)
            if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
                raise OSError(f"{path}: not a 64-bit ELF core")
            (phoff,) = struct.unpack_from("<Q", hdr, 32)
            phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
        for i in range(phnum):
            ptype, _flags, off, vaddr, _pa, filesz = struct.unpack_from(
                "<IIQQQQ", table, i * phentsize
            )
            if ptype == 1:  # PT_LOAD
                self._segs.append((vaddr, filesz, off))

    def read(self, addr: int, size: int) -> bytes:
        """`size` bytes of live kernel memory at `addr`."""
        if self._fd is None:
            # Kept open: a trace reads a few functions, and under emulation an open
            # of /proc/kcore costs more than the read (the process's one reader).
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        return _read_segments(self._fd, self._segs, addr, size)

    def close(self) -> None:
        """Close its file (a reader replaced by a newer one)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_kernel(addr: int, size: int) -> bytes:
    """`size` bytes of live kernel memory at `addr`, through the process's one
    `KcoreReader` (its segment table read once; read anew for an address outside
    it: memory hot-plug adds segments). OSError where /proc/kcore cannot be read,
    ValueError for an address in no segment."""
    global _KCORE
    if _KCORE is None:
        _KCORE = KcoreReader()
    try:
        return _KCORE.read(addr, size)
    except ValueError:
        _KCORE.close()
        _KCORE = KcoreReader()  # segments added since it was read
        return _KCORE.read(addr, size)


_KCORE: KcoreReader | None = None


def _read_segments(
    file: str | int, segs: list[tuple[int, int, int]], addr: int, size: int
) -> bytes:
    """`size` bytes at `addr` of a file (a path, or an open fd) of ELF segments `segs`."""
    for vaddr, filesz, off in segs:
        if vaddr <= addr < vaddr + filesz:
            n = min(size, vaddr + filesz - addr)
            if isinstance(file, int):
                return os.pread(file, n, off + addr - vaddr)
            fd = os.open(file, os.O_RDONLY)
            try:
                return os.pread(fd, n, off + addr - vaddr)
            finally:
                os.close(fd)
    raise ValueError(f"{addr:#x} is not in any loaded segment of {file}")


def function_code(symbolizer: Symbolizer, addr: int) -> tuple[int, bytes]:
    """(start, machine code) of the live kernel or BPF function containing `addr`.

    BPF: the program's jited_prog_insns (its subprograms are concatenated in
    jited_ksyms order). Kernel: the debug vmlinux when one matches, else /proc/kcore.
    """
    loc = symbolizer.locate(addr)
    if loc.symbol is None:
        raise ValueError(f"{addr:#x}: no symbol, cannot find its function")
    start = addr - loc.offset
    prog = symbolizer.bpf.program_at(addr) if loc.module == "bpf" else None
    if prog is not None and prog.locate(addr) is not None:
        fd = lib.bpf_prog_get_fd_by_id(prog.prog_id)
        if fd < 0:
            raise OSError(ctypes.get_errno(), f"cannot open BPF program {prog.prog_id}")
        try:
            _, image = jited_image(fd)
        finally:
            os.close(fd)
        pos = 0
        for fn in prog.funcs:
            if fn.start == start:
                return start, image[pos : pos + fn.end - fn.start]
            pos += fn.end - fn.start
    end = symbolizer.kallsyms.end_of(addr) or start + 4096
    size = min(end - start, 1 << 20)
    if symbolizer.lines is not None and loc.module is None:
        text = VmlinuxText(symbolizer.lines.path)
        return start, text.read(start - symbolizer.kaslr_offset, size)
    return start, read_kernel(start, size)


def disassemble_function(
    symbolizer: Symbolizer, addr: int, arch: str = "x86_64"
) -> list[Instruction]:
    """The whole function containing live address `addr`, annotated with source lines."""
    start, code = function_code(symbolizer, addr)
    return annotate(disassemble(code, start, arch), symbolizer.locate_many)


def branch_instruction(
    symbolizer: Symbolizer, addr: int, arch: str = "x86_64"
) -> Instruction | None:
    """The instruction at a branch's `from` address, with its location."""
    start, code = function_code(symbolizer, addr)
    insn = instruction_at(addr, start, lambda a, n: code[a - start : a - start + n], arch)
    if insn is None:
        return None
    return annotate([insn], symbolizer.locate_many)[0]
