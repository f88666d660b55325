"""Reading a loaded program's code for coverage (`ProgramCode`), while it is loaded.

Its translated instructions, functions and line records come from `bpf_prog_info`
(`kernel.programs`, `kernel.helpers`); its JIT image's conditional jumps from
capstone (`symbols.disasm`), for the branch directions LBR records show.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from pytest_lbr.coverage.code import Function, LineRecord, ProgramCode, first_line_record

__all__ = ["declared", "read_code"]

#: Conditional jumps as capstone names them: x86-64 `jcc` (not `jmp`), arm64's
#: `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`.
_ARM64_COND = ("cbz", "cbnz", "tbz", "tbnz")


def read_code(fd: int, arch: str) -> ProgramCode:
    """The code of the program behind `fd` (raises BpfError, OSError)."""
    from pytest_lbr.kernel.helpers import xlated_insns
    from pytest_lbr.programs.info import Btf, program_details
    from pytest_lbr.programs.lines import jited_image, source_path

    d = program_details(fd, lines=True)
    xlated = xlated_insns(fd)
    insns = d.func_insns or [0]
    functions = []
    with Btf(d.btf_id) as btf:
        for i, (start, length) in enumerate(d.functions):
            name = d.name if i == 0 else f"{d.name}_sub{i}"
            if i < len(d.func_types):
                name = btf.name(d.func_types[i]) or name
            functions.append(
                Function(name, insns[i] if i < len(insns) else 0, start, start + length)
            )
        records = sorted(
            LineRecord(
                li.insn_off,
                addr,
                source_path(btf.string(li.file_name_off) or "?"),
                li.line_col >> 10,
            )
            for li, addr in d.lines
        )
    jumps: tuple[tuple[int, int], ...] = ()
    if functions:
        _, image = jited_image(fd)
        jumps = _conditional_jumps(image, functions, arch)
    name = functions[0].name if functions else d.name  # BTF's, not the kernel's 15 bytes
    functions = [declared(fn, records) for fn in functions]
    return ProgramCode(name, d.tag, xlated, tuple(functions), tuple(records), jumps)


#: How far above its first statement a function's declaration may be (a long
#: parameter list, a comment, attributes).
_DECLARATION_REACH = 40


def declared(fn: Function, records: list[LineRecord]) -> Function:
    """`fn` with the line that declares it: the nearest line at or above its first
    line record naming it followed by "(" (BTF line info holds statements only)."""
    first = first_line_record(records, fn.insn)
    if first is None:
        return fn
    lines = _source_lines(first.file)
    call = re.compile(rf"\b{re.escape(fn.name)}\s*\(")
    for ln in range(first.line, max(first.line - _DECLARATION_REACH, 0), -1):
        if ln <= len(lines) and call.search(lines[ln - 1]):
            return dataclasses.replace(fn, line=ln)
    return fn


@functools.lru_cache(maxsize=64)
def _source_lines(path: str) -> list[str]:
    """A source file's lines ([] where it cannot be read: then no declaration)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _conditional_jumps(
    image: bytes, functions: list[Function], arch: str
) -> tuple[tuple[int, int], ...]:
    """(address, target) of the conditional jumps of each function's JIT code."""
    from pytest_lbr.symbols.disasm import disassemble

    out: list[tuple[int, int]] = []
    off = 0  # jited_prog_insns holds the functions' code back to back, in order
    for fn in functions:
        code = image[off : off + fn.jit_end - fn.jit_start]
        off += fn.jit_end - fn.jit_start
        for ins in disassemble(code, fn.jit_start, arch, jit=True):
            target = _jump_target(ins.mnemonic, ins.operands, arch)
            if target is not None:
                out.append((ins.addr, target))
    return tuple(sorted(out))


def _jump_target(mnemonic: str, operands: str, arch: str) -> int | None:
    """The target of a conditional jump whose target the instruction states."""
    last = operands.split(",")[-1].strip().lstrip("#")
    if arch == "x86_64":
        cond = mnemonic.startswith("j") and mnemonic != "jmp"
    else:
        cond = mnemonic.startswith("b.") or mnemonic in _ARM64_COND
    if not cond or not last.startswith("0x"):
        return None
    return int(last, 16)
