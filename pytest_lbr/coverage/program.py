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
from pytest_lbr.programs.written import WrittenPrograms

__all__ = ["declared", "read_code"]

#: Conditional jumps as capstone names them: x86-64 `jcc` (not `jmp`), arm64's
#: `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`.
_ARM64_COND = ("cbz", "cbnz", "tbz", "tbnz")


def read_code(fd: int, arch: str, written: WrittenPrograms | None = None) -> ProgramCode:
    """The code of the program behind `fd` (raises BpfError, OSError); `written`: the
    book of the loader that loaded it, whose object file tells its inlined calls."""
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
    where = written.loaded_from(d.id) if written is not None else None
    inlined = _inlined(where, functions, records, len(xlated) // 8)
    return ProgramCode(name, d.tag, xlated, tuple(functions), tuple(records), jumps, inlined)


def _inlined(
    where: tuple[str, str] | None,
    functions: list[Function],
    records: list[LineRecord],
    count: int,
) -> tuple[tuple[int, int, str, int], ...]:
    """The inlined calls of a program loaded from the object file `where` (its path
    and the program's function; None: not known, no calls told), by translated
    instruction: the object's DWARF gives each inlined copy's range in the object's
    instructions, and its line records (`.BTF.ext`) are the kernel's, one for one and
    in order, so a copy's records are the kernel's records of the same rank. Where
    they do not match (the verifier removed code, and its records), none is told."""
    from pytest_lbr.programs.inlined import object_facts
    from pytest_lbr.programs.lines import source_path

    if where is None:
        return ()
    try:
        found, calls = object_facts(where[0])
    except (OSError, ValueError):
        return ()
    out = []
    for f, fn in enumerate(functions):
        sym = found.function(fn.name)
        mine = [c for c in calls if c.function == fn.name] if sym is not None else []
        if sym is None or not mine:
            continue
        end = functions[f + 1].insn if f + 1 < len(functions) else count
        kernel = [k for k, r in enumerate(records) if fn.insn <= r.insn < end]
        theirs = found.lines_of(sym)
        if [r.line for r in theirs] != [records[k].line for k in kernel]:
            continue
        for c in mine:
            for r, k in zip(theirs, kernel, strict=True):
                if c.start <= sym.insn + r.insn < c.end:
                    stop = records[k + 1].insn if k + 1 < len(records) else count
                    out.append((records[k].insn, min(stop, end), source_path(c.file), c.line))
    return tuple(sorted(out))


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
