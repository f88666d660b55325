"""Addresses inside JITed BPF programs -> function name and C source line.

For each loaded program, bpf_prog_info gives the JIT address and length of
every subprogram (jited_ksyms, jited_func_lens), their BTF function types
(func_info) and, per source line, the line record (line_info) with the JIT
address where its code starts (jited_line_info, 1:1 with line_info). We take
the last line record at or before an address within its subprogram.

Reading those tables and describing a program's helper calls is the costly part
(several syscalls and a walk of its instructions), so `BpfPrograms` learns only where
each program is (one bpf_prog_info call) until an address falls inside it: a test that loads four
programs and traces one reads one.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import os
from collections.abc import Callable
from ctypes import c_uint32, c_uint64
from dataclasses import dataclass, replace

from ..bpf.libbpf import BpfError, prog_info
from ..kernel.helpers import BPF_MAP_TYPE_PROG_ARRAY, map_type
from ..model import KERNEL_NAME_MAX, Location, ProgramCalls
from .helper_calls import tail_callers
from .info import Btf, open_program, program_details, program_ids
from .written import WrittenPrograms

__all__ = [
    "BpfPrograms",
    "ProgramLines",
    "ProgramSpan",
    "jited_image",
    "read_program",
    "read_span",
    "source_path",
]


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
    #: Its helper calls as written and as translated (None: not described), as
    #: described for the last reader (`BpfPrograms.read`).
    calls: ProgramCalls | None = None
    #: The kernel's name for it (15 bytes at most): `name` is the C's.
    kernel_name: str = ""
    #: The instructions as written `calls` were described from (None: none known).
    described_from: bytes | None = None

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


def source_path(path: str) -> str:
    """A source file as a program's BTF names it, for people: BTF keeps the path clang was given; show it relative to the cwd when inside it."""
    return _relative_to(path, os.getcwd())


@functools.lru_cache(maxsize=1024)
def _relative_to(path: str, cwd: str) -> str:
    # Remembered: a program's line table names a few files hundreds of times, and
    # os.path.relpath is slow in Python (it normalises both paths each call).
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
            lines.append((addr, source_path(file) if file else None, li.line_col >> 10))
    lines.sort()
    # Named as the C wrote it: its main function's BTF name, where the kernel keeps
    # 15 bytes (BPF_OBJ_NAME_LEN - 1: "balancer_ingres" for balancer_ingress_v4).
    name = funcs[0].name if funcs and d.func_types else d.name
    return ProgramLines(d.id, name, d.tag, funcs, lines, kernel_name=d.name)


def jited_image(fd: int) -> tuple[int, bytes]:
    """(address of the main function, JITed machine code of the whole program)."""
    info, _ = prog_info(fd)
    full, bufs = prog_info(
        fd,
        jited_prog_insns=("jited_prog_len", info.jited_prog_len, ctypes.c_uint8),
        jited_ksyms=("nr_jited_ksyms", info.nr_jited_ksyms, c_uint64),
    )
    return bufs["jited_ksyms"][0], bytes(bufs["jited_prog_insns"])


@dataclass(frozen=True)
class ProgramSpan:
    """Where a loaded program's code is, and the maps it uses: all that
    `BpfPrograms.refresh` reads of a program (its tables wait for an address)."""

    prog_id: int
    name: str
    #: (start, end) JIT addresses of each function, main program first.
    functions: tuple[tuple[int, int], ...]
    map_ids: tuple[int, ...]

    def __contains__(self, addr: int) -> bool:
        for start, end in self.functions:  # a loop, not any(): asked for every address
            if start <= addr < end:
                return True
        return False


#: Functions and maps one bpf_prog_info call makes room for: more takes a second call.
_ROOM = 8


def read_span(fd: int) -> ProgramSpan:
    """Where the program behind `fd` is JITed and which maps it uses; raises BpfError.

    One bpf_prog_info call with arrays sized in advance, not one call to size them
    and another to fill them: the kernel fills what fits and says how many there are.
    """
    room = _ROOM
    while True:
        info, bufs = prog_info(
            fd,
            jited_ksyms=("nr_jited_ksyms", room, c_uint64),
            jited_func_lens=("nr_jited_func_lens", room, c_uint32),
            map_ids=("nr_map_ids", room, c_uint32),
        )
        most = max(info.nr_jited_ksyms, info.nr_jited_func_lens, info.nr_map_ids)
        if most <= room:
            break
        room = most
    starts, lens = bufs["jited_ksyms"], bufs["jited_func_lens"]
    functions = tuple(
        (starts[i], starts[i] + lens[i])
        for i in range(min(info.nr_jited_ksyms, info.nr_jited_func_lens))
        if starts[i]  # 0: not JITed, or addresses hidden from us
    )
    return ProgramSpan(
        info.id,
        info.name.decode("utf-8", "replace"),
        functions,
        tuple(bufs["map_ids"][: info.nr_map_ids]),
    )


class BpfPrograms:
    """The loaded BPF programs: where each one's code is, re-read when an address is
    new (`refresh`), and its line tables and helper calls, read the first time an
    address falls inside it (`locate`, `program_at`) or someone asks (`read`)."""

    def __init__(
        self,
        describe: Callable[[int, ProgramLines, WrittenPrograms | None], ProgramCalls] | None = None,
    ) -> None:
        #: Every program loaded at the last refresh (less those found gone since).
        self.spans: dict[int, ProgramSpan] = {}
        #: The programs whose tables have been read: a subset of `spans`.
        self.programs: dict[int, ProgramLines] = {}
        #: Describes a program's helper calls (fd, its tables, the reader's book).
        self.describe = describe
        #: map id -> BPF_MAP_TYPE_*, of the maps the known programs use.
        self._map_types: dict[int, int] = {}
        #: prog id -> programs whose tail calls can enter it; None: not read since refresh.
        self._callers: dict[int, tuple[str, ...]] | None = None
        #: The span `program_at` found last.
        self._last: ProgramSpan | None = None

    def refresh(self) -> None:
        """Learn where every program loaded since the last refresh is, and forget the
        unloaded ones (needs CAP_SYS_ADMIN)."""
        seen: set[int] = set()
        try:
            for pid in program_ids():
                seen.add(pid)
                if pid in self.spans:
                    continue
                try:
                    fd = open_program(pid)
                except BpfError:
                    continue  # unloaded since listed, or not ours to open
                try:
                    self.spans[pid] = read_span(fd)
                except BpfError:
                    pass  # unreadable: its addresses stay unnamed
                finally:
                    os.close(fd)
        except BpfError:
            return  # no privileges: BPF addresses stay unnamed
        for gone in set(self.spans) - seen:
            del self.spans[gone]
            self.programs.pop(gone, None)
        self._callers = None
        if self.programs:
            # Program arrays change while programs stay: name the callers anew.
            callers = self._tail_callers()
            for pid, prog in self.programs.items():
                if prog.calls is not None:
                    prog.calls = replace(prog.calls, tail_called_by=callers.get(pid, ()))

    def read(self, prog_id: int, written: WrittenPrograms | None = None) -> ProgramLines | None:
        """The tables of program `prog_id`, read now if not yet; None if it is not
        known, unloaded since the last refresh, or unreadable. Its `calls` are
        described with the instructions the book `written` has for it (none: from
        its translated instructions alone), again when they differ from the last
        reader's."""
        insns = written.insns(prog_id) if written is not None else None
        prog = self.programs.get(prog_id)
        if prog is not None and (self.describe is None or prog.described_from is insns):
            return prog
        if prog is None and prog_id not in self.spans:
            return None
        try:
            fd = open_program(prog_id)
        except BpfError:
            self.spans.pop(prog_id, None)  # unloaded: a new program may be JITed there
            self.programs.pop(prog_id, None)
            return None
        try:
            if prog is None:
                prog = read_program(fd)
            if self.describe is not None:
                prog.calls = self.describe(fd, prog, written)
                prog.described_from = insns
        except OSError:  # BpfError; a kernel-wide fact `describe` could not read
            self.spans.pop(prog_id, None)  # tried again after the next refresh, as when new
            self.programs.pop(prog_id, None)
            return None
        finally:
            os.close(fd)
        if prog.calls is not None:
            prog.calls = replace(prog.calls, tail_called_by=self._tail_callers().get(prog_id, ()))
        self.programs[prog_id] = prog
        return prog

    def program_at(self, addr: int, written: WrittenPrograms | None = None) -> ProgramLines | None:
        """The tables of the program whose JITed code holds `addr` (read if need be;
        `written`: as `read`)."""
        last = self._last  # a trace's addresses come mostly from one program
        if last is not None and addr in last and self.spans.get(last.prog_id) is last:
            return self.read(last.prog_id, written)
        for span in self.spans.values():
            if addr in span:
                self._last = span
                return self.read(span.prog_id, written)
        return None

    def locate(self, addr: int, written: WrittenPrograms | None = None) -> Location | None:
        """The Location of a JIT address among the loaded programs, or None
        (`written`: the book its program's helper calls are described with)."""
        prog = self.program_at(addr, written)
        return prog.locate(addr) if prog is not None else None

    def _tail_callers(self) -> dict[int, tuple[str, ...]]:
        """prog id -> names of the programs whose tail calls can enter it, read once
        per refresh: from the program arrays the known programs use."""
        if self._callers is None:
            arrays: dict[int, list[str]] = {}
            for span in self.spans.values():
                for map_id in span.map_ids:
                    if self._map_type(map_id) == BPF_MAP_TYPE_PROG_ARRAY:
                        arrays.setdefault(map_id, []).append(self._full_name(span))
            self._callers = tail_callers(arrays)
            live = {m for span in self.spans.values() for m in span.map_ids}
            self._map_types = {m: t for m, t in self._map_types.items() if m in live}
        return self._callers

    def _full_name(self, span: ProgramSpan) -> str:
        """A program's name as the C wrote it: the kernel's is cut at 15 bytes, so a
        name of 15 is read from its BTF (once: its tables keep it)."""
        prog = self.programs.get(span.prog_id)
        if prog is not None:
            return prog.name
        if len(span.name.encode()) < KERNEL_NAME_MAX:
            return span.name
        try:
            fd = open_program(span.prog_id)
        except BpfError:
            return span.name
        try:
            d = program_details(fd)
            if d.func_types:
                with Btf(d.btf_id) as btf:
                    return btf.name(d.func_types[0]) or span.name
        except BpfError:
            pass
        finally:
            os.close(fd)
        return span.name

    def _map_type(self, map_id: int) -> int | None:
        """The type of map `map_id`, remembered (a map's type never changes); None if gone."""
        if map_id not in self._map_types:
            try:
                self._map_types[map_id] = map_type(map_id)
            except BpfError:
                return None
        return self._map_types[map_id]
