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
import functools
import os
from collections.abc import Callable
from ctypes import c_uint64
from dataclasses import dataclass, replace

from ..kernel.programs import Btf, open_program, program_details, program_ids
from ..libbpf import BpfError, prog_info
from ..model import Location, ProgramCalls
from .helpers import tail_callers

__all__ = ["BpfPrograms", "ProgramLines", "read_program", "jited_image"]


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
    #: Its helper calls as written and as translated (None: not described).
    calls: ProgramCalls | None = None

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
        return Location(addr, fn.name, addr - fn.start, "bpf", file, line, program=self.calls)


def _source_path(path: str) -> str:
    """BTF keeps the path clang was given; show it relative to the cwd when inside it."""
    return _relative_to(path, os.getcwd())


@functools.lru_cache(maxsize=1024)
def _relative_to(path: str, cwd: str) -> str:
    # Remembered: a program's line table names a few files hundreds of times, and
    # os.path.relpath took 0.2 ms a call under TCG.
    if os.path.isabs(path):
        try:
            rel = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel
    return os.path.normpath(path)


def read_program(fd: int) -> ProgramLines:
    """Read the function and line tables of the program behind `fd`."""
    d = program_details(fd, lines=True)
    with Btf(d.btf_id) as btf:
        funcs: list[_Func] = []
        for i, (start, length) in enumerate(d.functions):
            fname = d.name if i == 0 else f"{d.name}_sub{i}"
            if i < len(d.func_types):
                fname = btf.name(d.func_types[i]) or fname
            funcs.append(_Func(start, start + length, fname))
        lines: list[tuple[int, str | None, int]] = []
        for li, addr in d.lines:
            file = btf.string(li.file_name_off)
            lines.append((addr, _source_path(file) if file else None, li.line_col >> 10))
    lines.sort()
    return ProgramLines(d.id, d.name, d.tag, funcs, lines)


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

    def __init__(self, describe: Callable[[int, ProgramLines], ProgramCalls] | None = None) -> None:
        self.programs: dict[int, ProgramLines] = {}
        self.error: str | None = None
        #: Describes a newly read program's helper calls (fd, its tables).
        self.describe = describe

    def refresh(self) -> None:
        """Read every program loaded since the last refresh (needs CAP_SYS_ADMIN)."""
        seen: set[int] = set()
        try:
            for pid in program_ids():
                seen.add(pid)
                if pid in self.programs:
                    continue
                try:
                    fd = open_program(pid)
                except BpfError as exc:
                    self.error = f"cannot open BPF program {pid}: {exc.strerror}"
                    continue
                try:
                    prog = read_program(fd)
                    if self.describe is not None:
                        prog.calls = self.describe(fd, prog)
                    self.programs[pid] = prog
                except BpfError as exc:
                    self.error = str(exc)
                finally:
                    os.close(fd)
        except BpfError as exc:
            self.error = f"cannot list BPF programs: {exc.strerror}"
            return
        for gone in set(self.programs) - seen:
            del self.programs[gone]
        self._name_tail_callers()

    def _name_tail_callers(self) -> None:
        """Tell each program which programs' tail calls can enter it (read now:
        program arrays change while programs stay)."""
        fds: dict[int, tuple[int, ProgramCalls]] = {}
        try:
            for pid, prog in self.programs.items():
                if prog.calls and any(c.fate == "tail call" for c in prog.calls.calls):
                    try:
                        fds[pid] = (open_program(pid), prog.calls)
                    except BpfError:
                        continue
            callers = tail_callers(fds)
        finally:
            for fd, _ in fds.values():
                os.close(fd)
        for pid, prog in self.programs.items():
            if prog.calls is not None:
                prog.calls = replace(prog.calls, tail_called_by=callers.get(pid, ()))

    def locate(self, addr: int) -> Location | None:
        """The Location of a JIT address among the known programs, or None."""
        for prog in self.programs.values():
            if prog.start <= addr < prog.end:
                loc = prog.locate(addr)
                if loc is not None:
                    return loc
        return None
