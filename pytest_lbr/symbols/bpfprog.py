"""Addresses inside JITed BPF programs -> function name and C source line.

For each loaded program, bpf_prog_info gives the JIT address and length of
every subprogram (jited_ksyms, jited_func_lens), their BTF function types
(func_info) and, per source line, the line record (line_info) with the JIT
address where its code starts (jited_line_info, 1:1 with line_info). We take
the last line record at or before an address within its subprogram.
"""

from __future__ import annotations

import bisect
import ctypes
import os
from ctypes import Structure, c_uint32, c_uint64
from dataclasses import dataclass

from ..libbpf import BpfError, lib, prog_info
from ..model import Location

__all__ = ["BpfPrograms", "ProgramLines", "read_program", "jited_image"]


class _bpf_line_info(Structure):  # noqa: N801 -- uapi name
    _fields_ = [
        ("insn_off", c_uint32),
        ("file_name_off", c_uint32),
        ("line_off", c_uint32),
        ("line_col", c_uint32),
    ]


class _bpf_func_info(Structure):  # noqa: N801 -- uapi name
    _fields_ = [("insn_off", c_uint32), ("type_id", c_uint32)]


class _btf_type(Structure):  # noqa: N801 -- uapi name
    _fields_ = [("name_off", c_uint32), ("info", c_uint32), ("size", c_uint32)]


@dataclass(frozen=True)
class _Func:
    start: int
    end: int
    name: str


@dataclass
class ProgramLines:
    """Line and function tables of one loaded BPF program."""

    prog_id: int
    name: str
    tag: str
    funcs: list[_Func]
    #: (jit address, file, line), sorted by address.
    lines: list[tuple[int, str | None, int]]

    @property
    def start(self) -> int:
        return min(f.start for f in self.funcs)

    @property
    def end(self) -> int:
        return max(f.end for f in self.funcs)

    def locate(self, addr: int) -> Location | None:
        """The Location of `addr` if it is inside this program's JIT image."""
        for fn in self.funcs:
            if fn.start <= addr < fn.end:
                break
        else:
            return None
        file: str | None = None
        line: int | None = None
        i = bisect.bisect_right(self.lines, (addr, "\uffff", 1 << 31)) - 1
        if i >= 0 and self.lines[i][0] >= fn.start:
            _, file, line = self.lines[i]
        return Location(addr, fn.name, addr - fn.start, "bpf", file, line)


def _source_path(path: str) -> str:
    """BTF keeps the path clang was given; show it relative to the cwd when inside it."""
    if os.path.isabs(path):
        try:
            rel = os.path.relpath(path)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel
    return os.path.normpath(path)


def read_program(fd: int) -> ProgramLines:
    """Read the function and line tables of the program behind `fd`."""
    info, _ = prog_info(fd)
    nk, nl = info.nr_jited_ksyms, info.nr_line_info
    nf = info.nr_func_info
    arrays = {
        "jited_ksyms": ("nr_jited_ksyms", nk, c_uint64),
        "jited_func_lens": ("nr_jited_func_lens", info.nr_jited_func_lens, c_uint32),
        "func_info": ("nr_func_info", nf, _bpf_func_info),
        "line_info": ("nr_line_info", nl, _bpf_line_info),
        "jited_line_info": ("nr_jited_line_info", info.nr_jited_line_info, c_uint64),
    }
    full, bufs = prog_info(fd, **arrays)
    name = full.name.decode("utf-8", "replace")
    tag = bytes(full.tag).hex()
    btf = lib.btf__load_from_kernel_by_id(full.btf_id) if full.btf_id else None
    try:
        funcs: list[_Func] = []
        for i in range(full.nr_jited_ksyms):
            start = bufs["jited_ksyms"][i]
            length = bufs["jited_func_lens"][i] if i < full.nr_jited_func_lens else 0
            fname = name if i == 0 else f"{name}_sub{i}"
            if btf and i < full.nr_func_info:
                fname = _btf_name(btf, bufs["func_info"][i].type_id) or fname
            funcs.append(_Func(start, start + length, fname))
        lines: list[tuple[int, str | None, int]] = []
        n = min(full.nr_line_info, full.nr_jited_line_info)
        for i in range(n):
            li = bufs["line_info"][i]
            file = _btf_str(btf, li.file_name_off) if btf else None
            lines.append(
                (
                    bufs["jited_line_info"][i],
                    _source_path(file) if file else None,
                    li.line_col >> 10,
                )
            )
        lines.sort()
    finally:
        if btf:
            lib.btf__free(btf)
    return ProgramLines(full.id, name, tag, funcs, lines)


def _btf_str(btf: int, off: int) -> str | None:
    s = lib.btf__str_by_offset(btf, off)
    return s.decode("utf-8", "replace") if s else None


def _btf_name(btf: int, type_id: int) -> str | None:
    t = lib.btf__type_by_id(btf, type_id)
    if not t:
        return None
    return _btf_str(btf, _btf_type.from_address(t).name_off)


def jited_image(fd: int) -> tuple[int, bytes]:
    """(address of the main function, JITed machine code of the whole program)."""
    info, _ = prog_info(fd)
    full, bufs = prog_info(
        fd,
        jited_prog_insns=("jited_prog_len", info.jited_prog_len, ctypes.c_uint8),
        jited_ksyms=("nr_jited_ksyms", info.nr_jited_ksyms, c_uint64),
    )
    return bufs["jited_ksyms"][0], bytes(bufs["jited_prog_insns"])


class BpfPrograms:
    """All loaded BPF programs' line tables, re-read lazily when an address is new."""

    def __init__(self) -> None:
        self.programs: dict[int, ProgramLines] = {}
        self.error: str | None = None

    def refresh(self) -> None:
        """Read every program loaded since the last refresh (needs CAP_SYS_ADMIN)."""
        seen: set[int] = set()
        cur = c_uint32(0)
        while lib.bpf_prog_get_next_id(cur.value, ctypes.byref(cur)) == 0:
            pid = cur.value
            seen.add(pid)
            if pid in self.programs:
                continue
            fd = lib.bpf_prog_get_fd_by_id(pid)
            if fd < 0:
                self.error = f"cannot open BPF program {pid}: {os.strerror(ctypes.get_errno())}"
                continue
            try:
                self.programs[pid] = read_program(fd)
            except BpfError as exc:
                self.error = str(exc)
            finally:
                os.close(fd)
        for gone in set(self.programs) - seen:
            del self.programs[gone]

    def locate(self, addr: int) -> Location | None:
        """The Location of a JIT address among the known programs, or None."""
        for prog in self.programs.values():
            if prog.start <= addr < prog.end:
                loc = prog.locate(addr)
                if loc is not None:
                    return loc
        return None
