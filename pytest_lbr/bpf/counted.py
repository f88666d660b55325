"""Programs loaded again with a counter per basic block (exact coverage).

After libbpf loaded an object as usual, `count_object` takes each program's final
instructions (`bpf_program__insns`: relocated, subprograms appended), puts a counter
at each block (`bytecode.instrument`), loads the result with `bpf_prog_load` (same
type, attach target, flags, BTF, with its function and line records re-aimed from
the object's `.BTF.ext`) and puts it in place of the original under the same fd
(`dup2`): libbpf's object, `bpf.load`'s `BpfObject` and every attach call then use
the counted program, and the original is freed. Program arrays the object filled
(`__array(values, ...)`) are pointed at the counted programs too.

The counts are in one array map per program (`CountedProgram.read`). A program the
verifier will not take with counters keeps running as it was: `count_object`
returns why, and the caller says so in one line. Written here, on libbpf's
`bpf_prog_load`, because libbpf's own hook into its load path
(`prog_prepare_load_fn`) comes only with a custom section handler, which would
replace libbpf's own for the section (its attach-target resolution included).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_lbr.bpf.libbpf import (
    BpfError,
    bpf_func_info,
    bpf_line_info,
    bpf_prog_info,
    lib,
    prog_info,
)
from pytest_lbr.bytecode.flow import ControlFlow, control_flow, without_constants
from pytest_lbr.bytecode.instructions import function_starts
from pytest_lbr.bytecode.instrument import Instrumented, InstrumentError, instrument
from pytest_lbr.programs.btf_ext import ObjectLines, RawLine
from pytest_lbr.programs.info import Btf, program_details
from pytest_lbr.programs.inlined import InlinedCall, object_facts

__all__ = ["CountedProgram", "count_object"]

_MAP_TYPE_ARRAY, _MAP_TYPE_PROG_ARRAY = 2, 3
#: Program types whose program another object holds by fd at load (struct_ops maps)
#: or that replace another program (freplace): not counted.
_NOT_COUNTED = {27: "struct_ops", 28: "freplace (ext)"}
_LOG_SIZE = 1 << 20
#: The verifier log's closing statistics: the reason is the line before them.
_LOG_STATS = ("processed ", "verification time", "stack depth", "func#")


class _LoadOpts(ctypes.Structure):
    """The prefix of libbpf's `struct bpf_prog_load_opts` (1.0 on) this module sets."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("attempts", ctypes.c_int),
        ("expected_attach_type", ctypes.c_int),
        ("prog_btf_fd", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_ifindex", ctypes.c_uint32),
        ("kern_version", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("attach_prog_fd", ctypes.c_uint32),
        ("attach_btf_obj_fd", ctypes.c_uint32),
        ("fd_array", ctypes.c_void_p),
        ("func_info", ctypes.c_void_p),
        ("func_info_cnt", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("line_info", ctypes.c_void_p),
        ("line_info_cnt", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_char_p),
    ]


@dataclass
class CountedProgram:
    """A program running with counters: what it was loaded from and where its counts are."""

    name: str
    #: The kernel's tag of the program as written (before counters).
    tag: str
    #: libbpf's instructions (original indices) and where its functions start.
    insns: bytes
    function_starts: tuple[int, ...]
    #: Function names by start, main first (BTF's names).
    function_names: tuple[str, ...]
    #: (instruction, file, line) of each line record, by original index.
    lines: tuple[tuple[int, str, int], ...]
    #: (first, end, file, line): instructions [first, end) are an inlined copy of a
    #: function called at file:line (the object's DWARF).
    inlined: tuple[tuple[int, int, str, int], ...]
    layout: Instrumented
    map_fd: int
    #: The counted program's id.
    prog_id: int
    #: The counters' map value, in bytes.
    value_size: int
    _last: list[int] = field(default_factory=list)

    def read(self) -> list[int]:
        """Every counter's runs since the last read (raises BpfError)."""
        size = 8 * self.layout.counters
        value = ctypes.create_string_buffer(self.value_size)
        key = ctypes.c_uint32(0)
        if lib.bpf_map_lookup_elem(self.map_fd, ctypes.byref(key), value) != 0:
            raise BpfError(ctypes.get_errno() or errno.EIO, f"cannot read {self.name}'s counters")
        now = [int.from_bytes(value.raw[k : k + 8], "little") for k in range(0, size, 8)]
        last = self._last or [0] * len(now)
        self._last = now
        return [n - o for n, o in zip(now, last, strict=True)]

    def gone(self) -> bool:
        """The counted program is unloaded (its object closed)."""
        fd = lib.bpf_prog_get_fd_by_id(self.prog_id)
        if fd < 0:
            return True
        os.close(fd)
        return False

    def close(self) -> None:
        """Let the counters go (after the last `read`)."""
        if self.map_fd >= 0:
            os.close(self.map_fd)
            self.map_fd = -1


def count_object(
    ptr: int, path: Path, on_problem: Callable[[str], None]
) -> dict[str, CountedProgram]:
    """Load every program of libbpf object `ptr` (loaded from `path`) again with
    counters, in place of the original; program name -> its counts. A program
    that cannot take them runs as it was: `on_problem` gets one line saying why."""
    try:
        found, calls = object_facts(path)
    except (OSError, ValueError) as exc:
        on_problem(f"{path.name}: its programs run without counters: {exc}")
        return {}
    out: dict[str, CountedProgram] = {}
    replaced: dict[int, int] = {}  # original program id -> counted program's fd
    p = lib.bpf_object__next_program(ptr, None)
    while p:
        name = lib.bpf_program__name(p).decode()
        if lib.bpf_program__fd(p) >= 0:
            try:
                old_id = prog_info(lib.bpf_program__fd(p))[0].id
                out[name] = _count(ptr, p, name, found, calls)
                replaced[old_id] = lib.bpf_program__fd(p)
            except (InstrumentError, BpfError, OSError, ValueError) as exc:
                on_problem(f"{name} ({path.name}) runs without counters: {exc}")
        p = lib.bpf_object__next_program(ptr, p)
    if replaced:
        _point_program_arrays(ptr, replaced)
    return out


@functools.lru_cache(maxsize=64)
def _flow(shape: bytes, starts: tuple[int, ...]) -> ControlFlow:
    """The control flow of a program's code without its maps' fds (new at every load
    of the same object), worked out once."""
    return control_flow(shape, starts)


def _count(
    obj: int, p: int, name: str, found: ObjectLines, calls: tuple[InlinedCall, ...]
) -> CountedProgram:
    old_fd = lib.bpf_program__fd(p)
    info, _ = prog_info(old_fd)
    if info.type in _NOT_COUNTED:
        raise InstrumentError(f"a {_NOT_COUNTED[info.type]} program is not counted")
    raw = lib.bpf_program__insns(p)
    insns = ctypes.string_at(raw, lib.bpf_program__insn_cnt(p) * 8) if raw else b""
    starts = function_starts(insns)
    details = program_details(old_fd)
    if len(details.func_types) != len(starts):
        raise InstrumentError("its BTF function records do not match its functions")
    with Btf(details.btf_id) as btf:
        names = tuple(btf.name(t) or "" for t in details.func_types)
    section = lib.bpf_program__section_name(p).decode()
    records: list[tuple[int, RawLine]] = []
    inlined: list[tuple[int, int, str, int]] = []
    for k, (fname, start) in enumerate(zip(names, starts, strict=True)):
        sym = found.function(fname, section if k == 0 else None)
        end = starts[k + 1] if k + 1 < len(starts) else len(insns) // 8
        if sym is None or sym.count != end - start:
            raise InstrumentError(f"cannot find function {fname} in the object's symbols")
        records += [(start + r.insn, r) for r in found.lines_of(sym)]
        inlined += [
            (start + c.start - sym.insn, start + c.end - sym.insn, c.file, c.line)
            for c in calls
            if c.function == fname and sym.insn <= c.start < sym.insn + sym.count
        ]
    flow = _flow(without_constants(insns), tuple(starts))
    value_size = 8 * (2 * len(flow.blocks) + 1)
    map_fd = lib.bpf_map_create(_MAP_TYPE_ARRAY, b"lbr_cov", 4, value_size, 1, None)
    if map_fd < 0:
        raise BpfError(-map_fd, "cannot create the counters' map")
    try:
        layout = instrument(insns, flow, map_fd)
        new_fd = _load(obj, p, info, layout, starts, details.func_types, records)
    except BaseException:
        os.close(map_fd)
        raise
    os.dup2(new_fd, old_fd)  # libbpf's fd now holds the counted program
    os.close(new_fd)
    return CountedProgram(
        name,
        bytes(info.tag).hex(),
        insns,
        tuple(starts),
        names,
        tuple((i, found.string(r.file_name_off), r.line) for i, r in sorted(records, key=_first)),
        tuple(sorted(inlined)),
        layout,
        map_fd,
        prog_info(old_fd)[0].id,
        value_size,
    )


def _first(item: tuple[int, RawLine]) -> int:
    return item[0]


def _load(
    obj: int,
    p: int,
    info: bpf_prog_info,
    layout: Instrumented,
    starts: list[int],
    func_types: list[int],
    records: list[tuple[int, RawLine]],
) -> int:
    """Load the counted instructions like the original; its fd (raises BpfError
    with the verifier's last lines)."""
    funcs = (bpf_func_info * len(starts))(
        *(
            bpf_func_info(at, t)
            for at, t in zip(layout.function_starts(starts), func_types, strict=True)
        )
    )
    ordered = sorted(records, key=_first)
    lines = (bpf_line_info * len(ordered))(
        *(
            bpf_line_info(layout.record_at[i], r.file_name_off, r.line_off, r.line_col)
            for i, r in ordered
        )
    )
    log = ctypes.create_string_buffer(_LOG_SIZE)
    opts = _LoadOpts(sz=ctypes.sizeof(_LoadOpts))
    opts.expected_attach_type = lib.bpf_program__expected_attach_type(p)
    opts.prog_flags = lib.bpf_program__flags(p) | _sleepable(p)
    opts.prog_btf_fd = lib.bpf_object__btf_fd(obj)
    opts.func_info, opts.func_info_cnt = ctypes.addressof(funcs), len(starts)
    opts.func_info_rec_size = ctypes.sizeof(bpf_func_info)
    if ordered:
        opts.line_info, opts.line_info_cnt = ctypes.addressof(lines), len(ordered)
        opts.line_info_rec_size = ctypes.sizeof(bpf_line_info)
    opts.attach_btf_id = info.attach_btf_id
    btf_obj_fd = -1
    if info.attach_btf_obj_id:
        btf_obj_fd = lib.bpf_btf_get_fd_by_id(info.attach_btf_obj_id)
        opts.attach_btf_obj_fd = max(btf_obj_fd, 0)
    opts.log_level, opts.log_size = 1, _LOG_SIZE
    opts.log_buf = ctypes.cast(log, ctypes.c_char_p)
    code = layout.insns
    buf = ctypes.create_string_buffer(code, len(code))
    license = b"GPL" if info.gpl_compatible & 1 else b"Proprietary"
    try:
        fd = lib.bpf_prog_load(
            info.type,
            bytes(info.name).split(b"\0")[0],
            license,
            buf,
            len(code) // 8,
            ctypes.byref(opts),
        )
    finally:
        if btf_obj_fd >= 0:
            os.close(btf_obj_fd)
    if fd < 0:
        said = [
            ln
            for ln in log.value.decode(errors="replace").splitlines()
            if ln.strip() and not ln.startswith(_LOG_STATS)
        ]
        tail = f" ({said[-1]})" if said else ""
        raise BpfError(-fd, f"the verifier refused it with counters{tail}")
    return int(fd)


#: BPF_F_SLEEPABLE; BPF_PROG_TYPE_SYSCALL, which the kernel loads only sleepable.
_SLEEPABLE, _SYSCALL_PROG = 1 << 4, 31


def _sleepable(p: int) -> int:
    """BPF_F_SLEEPABLE where libbpf set it at load: it does so by section
    (`fentry.s/`, `lsm.s/`, `uprobe.s/`..., and `syscall`), not in the flags
    `bpf_program__flags` returns."""
    section = lib.bpf_program__section_name(p).decode()
    kind = section.split("/", 1)[0]
    sleeps = kind.endswith(".s") or ".s." in kind or lib.bpf_program__type(p) == _SYSCALL_PROG
    return _SLEEPABLE if sleeps else 0


def _point_program_arrays(obj: int, replaced: dict[int, int]) -> None:
    """Program arrays the object filled at load hold the originals: hold the
    counted programs instead."""
    m = lib.bpf_object__next_map(obj, None)
    while m:
        fd = lib.bpf_map__fd(m)
        if lib.bpf_map__type(m) == _MAP_TYPE_PROG_ARRAY and fd >= 0:
            for k in range(lib.bpf_map__max_entries(m)):
                key, value = ctypes.c_uint32(k), ctypes.c_uint32(0)
                if lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value)) != 0:
                    continue
                new = replaced.get(value.value)
                if new is not None:
                    prog = ctypes.c_uint32(new)
                    lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(prog), 0)
        m = lib.bpf_object__next_map(obj, m)
