"""Loaded BPF programs and their BTF, as the kernel describes them.

One iterator over program ids, one reader of `bpf_prog_info` (with the arrays a
caller asks for) and one BTF name lookup; `find.py` (finding a target),
`lines.py` (lines of JITed code) and the graph backend (where a program's
code is) all read programs through here.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Iterator
from ctypes import c_uint8, c_uint32, c_uint64
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pytest_lbr.bpf.libbpf import (
    BPF_TAG_SIZE,
    BpfError,
    bpf_func_info,
    bpf_line_info,
    btf_type,
    check_int,
    lib,
    prog_info,
)

__all__ = ["Btf", "ProgramDetails", "open_program", "program_details", "program_ids"]


def program_ids() -> Iterator[int]:
    """The id of every loaded BPF program, increasing; raises BpfError (EPERM without root)."""
    cur = c_uint32(0)
    nxt = c_uint32(0)
    while True:
        try:
            check_int(
                lib.bpf_prog_get_next_id(cur.value, ctypes.byref(nxt)), "bpf_prog_get_next_id"
            )
        except BpfError as exc:
            if exc.errno == errno.ENOENT:  # past the last id
                return
            raise
        cur.value = nxt.value
        yield nxt.value


def open_program(prog_id: int) -> int:
    """An fd of program `prog_id` (the caller closes it); raises BpfError (ENOENT: unloaded)."""
    return check_int(lib.bpf_prog_get_fd_by_id(prog_id), f"bpf_prog_get_fd_by_id({prog_id})")


@dataclass
class ProgramDetails:
    """What `bpf_prog_info` says about one program.

    `functions` is one (JIT start, length) per function, main program first
    (empty if not JITed); `func_types` their BTF type ids; `func_insns` their
    first translated instructions; `tags` their tags
    (the main program's symbol uses `tag`, a subprogram's its own); `lines`
    the line records with, 1:1, the JIT address where each one's code starts.
    """

    id: int
    name: str
    tag: str
    type_id: int
    btf_id: int
    functions: list[tuple[int, int]] = field(default_factory=list)
    func_types: list[int] = field(default_factory=list)
    #: The first translated instruction of each function (func_info's insn_off).
    func_insns: list[int] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    lines: list[tuple[bpf_line_info, int]] = field(default_factory=list)

    @property
    def type(self) -> str:
        """libbpf's name of the program type ("xdp", "tracing", ...)."""
        name = lib.libbpf_bpf_prog_type_str(self.type_id)
        return name.decode() if name else str(self.type_id)


def program_details(fd: int, *, lines: bool = False) -> ProgramDetails:
    """Describe the program behind `fd`; `lines` also reads its line records.

    Two `bpf_obj_get_info_by_fd` calls: the first learns the array sizes, the
    second fills them. Raises BpfError.
    """
    info, _ = prog_info(fd)
    nf = info.nr_func_info if info.btf_id else 0
    arrays: dict[str, tuple[str, int, Any]] = {
        "jited_ksyms": ("nr_jited_ksyms", info.nr_jited_ksyms, c_uint64),
        "jited_func_lens": ("nr_jited_func_lens", info.nr_jited_func_lens, c_uint32),
        "prog_tags": ("nr_prog_tags", info.nr_prog_tags, c_uint8 * BPF_TAG_SIZE),
    }
    if nf:
        arrays["func_info"] = ("nr_func_info", nf, bpf_func_info)
    if lines and info.btf_id:
        arrays["line_info"] = ("nr_line_info", info.nr_line_info, bpf_line_info)
        arrays["jited_line_info"] = ("nr_jited_line_info", info.nr_jited_line_info, c_uint64)
    full, bufs = prog_info(fd, **arrays)
    # The second call reports how many the kernel has now; never read past what we sized.
    nk = min(full.nr_jited_ksyms, full.nr_jited_func_lens, info.nr_jited_ksyms)
    out = ProgramDetails(
        id=full.id,
        name=full.name.decode("utf-8", "replace"),
        tag=bytes(full.tag).hex(),
        type_id=full.type,
        btf_id=full.btf_id,
        functions=[(bufs["jited_ksyms"][i], bufs["jited_func_lens"][i]) for i in range(nk)],
        tags=[
            bytes(t).hex() for t in bufs["prog_tags"][: min(full.nr_prog_tags, info.nr_prog_tags)]
        ],
    )
    if nf:
        records = bufs["func_info"][: min(full.nr_func_info, nf)]
        out.func_types = [r.type_id for r in records]
        out.func_insns = [r.insn_off for r in records]
    if "line_info" in bufs:
        n = min(full.nr_line_info, full.nr_jited_line_info, info.nr_line_info)
        n = min(n, info.nr_jited_line_info)
        out.lines = [(bufs["line_info"][i], bufs["jited_line_info"][i]) for i in range(n)]
    return out


_BTF_KIND_INT = 1
_BTF_INT_SIGNED = 1


class Btf:
    """A kernel BTF object (a program's, by id) for name lookups; a context manager.

    A BTF object that cannot be loaded (gone, unreadable) answers None to every
    lookup: names are a nicety wherever they are used.
    """

    def __init__(self, btf_id: int) -> None:
        self._btf = lib.btf__load_from_kernel_by_id(btf_id) if btf_id else None

    def string(self, offset: int) -> str | None:
        """The string at `offset` of the string section."""
        if not self._btf:
            return None
        s = lib.btf__str_by_offset(self._btf, offset)
        return s.decode("utf-8", "replace") if s else None

    def name(self, type_id: int) -> str | None:
        """The name of type `type_id` (e.g. a function's)."""
        if not self._btf:
            return None
        t = lib.btf__type_by_id(self._btf, type_id)
        return self.string(btf_type.from_address(t).name_off) if t else None

    def return_type(self, func_type_id: int) -> tuple[int, bool] | None:
        """What function `func_type_id` (a BTF FUNC) returns: (size in bytes, signed)
        for an integer, (0, False) for void; None where the types cannot be read or
        it returns something else (a pointer)."""
        from pytest_lbr.kernel.kernel_btf import resolve_type

        if not self._btf:
            return None
        func = lib.btf__type_by_id(self._btf, func_type_id)
        proto = lib.btf__type_by_id(self._btf, btf_type.from_address(func).size) if func else None
        if not proto:
            return None
        ret = btf_type.from_address(proto).size  # FUNC_PROTO's `type`: the return type
        if ret == 0:
            return 0, False
        found = resolve_type(self._btf, ret)
        if found is None or (found[1].info >> 24) & 0x1F != _BTF_KIND_INT:
            return None
        t = found[1]
        # BTF_KIND_INT is followed by a u32 whose bits 24-27 are its encoding.
        encoding = ctypes.c_uint32.from_address(lib.btf__type_by_id(self._btf, found[0]) + 12)
        return t.size, bool((encoding.value >> 24) & _BTF_INT_SIGNED)

    def close(self) -> None:
        """Free the BTF object (idempotent)."""
        btf, self._btf = self._btf, None
        if btf:
            lib.btf__free(btf)

    def __enter__(self) -> Btf:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
