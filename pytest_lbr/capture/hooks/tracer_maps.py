"""Spare sets of the LBR tracer's large shared maps, lent from one hook set to the next.

Every `HookSet` needs the maps its tracer objects share: a 4 MiB ring buffer,
the per-CPU snapshot slots (.bss, 776 KiB), the followed-tgid hash, the lost
counter, the armed switch and the cgroup array. Creating the large ones was
most of loading a hook (with them lent, what is left is mostly the verifier's
part). A session therefore keeps a few sets
whose last hook set closed cleanly and lends them to its next hook sets
(`HookSet(maps=...)`), with the reader of their ring buffer (`RingReader`: libbpf's
`ring_buffer__new` maps the ring into this process, and unmapping it is as
dear). Only the `POOLED` maps are kept: reusing a map costs
libbpf's `bpf_map__reuse_fd()`, which opens "/" to reserve an fd number (a round
trip to the host on the guests' 9p root), more than creating a one-entry map. So each hook
set's first object makes its own lost counter, armed switch and cgroup array,
new as the set starts: nothing to reset.

A set comes back only if it is as new: its ring buffer read to the end after
every link was gone, its tgid hash empty (a set that followed forks is closed
instead, see `HookSet._clean_maps`). `close()` closes the spare sets; a set
lent out is closed when given back after that. A spare set keeps its ring mapped
(twice, for wrap-around: up to 8 MiB of RSS once its pages were read).

The session's tracer programs are kept here too (`TracerImages`): a fentry/fexit
program hooked on a BPF program is loaded again for the next program from what
libbpf's first load of it gave the kernel, without libbpf's open of the object
(see `TracerImage`).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
import threading
from ctypes import CFUNCTYPE, Structure, c_char, c_int, c_size_t, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass, field

from pytest_lbr.bpf.libbpf import BpfError, check_int, lib, prog_info, sys_bpf
from pytest_lbr.bytecode.instructions import CALL, LD_IMM64, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE
from pytest_lbr.kernel.helpers import bpf_map_info
from pytest_lbr.programs.btf_ext import ObjectLines, object_lines

__all__ = [
    "POOLED",
    "SET_MAPS",
    "SPARE_SETS",
    "MapSet",
    "RingReader",
    "TracerImage",
    "TracerImages",
    "TracerMaps",
]

#: Sets a session keeps ready: a trace's own hook set and a kept program's hook
#: set may be closed together.
SPARE_SETS = 2

#: The keys (`HookSet`'s names for the shared maps) of the maps a spare set holds.
POOLED = ("ringbuf", "bss", "tgids")

_SAMPLE_CB = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)


class RingReader:
    """libbpf's reader of the tracer's ring buffer (map fd `fd`): each record read
    is appended to `records`, as bytes, for whoever reads the ring now."""

    def __init__(self, fd: int) -> None:
        self.records: list[bytes] = []

        def on_sample(_ctx: int | None, data: int, size: int) -> int:
            self.records.append(ctypes.string_at(data, size))
            return 0

        self._cb = _SAMPLE_CB(on_sample)  # libbpf calls it until `close`
        rb = lib.ring_buffer__new(fd, self._cb, None, None)
        if not rb:
            raise BpfError(ctypes.get_errno() or errno.EINVAL, "ring_buffer__new")
        self._rb: int | None = rb

    def poll(self, timeout_ms: int) -> None:
        """Read what arrived, waiting up to `timeout_ms` for the first record."""
        if self._rb is not None:  # libbpf would follow a freed pointer
            check_int(lib.ring_buffer__poll(self._rb, timeout_ms), "ring_buffer__poll")

    def consume(self) -> None:
        """Read everything the ring holds now."""
        while self._rb is not None and (
            check_int(lib.ring_buffer__consume(self._rb), "ring_buffer__consume") > 0
        ):
            pass

    def close(self) -> None:
        """Unmap the ring (idempotent); the map lives on while an fd holds it."""
        rb, self._rb = self._rb, None
        if rb is not None:
            lib.ring_buffer__free(rb)


@dataclass
class MapSet:
    """A spare set: `POOLED` key -> fd (owned) and the reader of its ring."""

    fds: dict[str, int]
    ring: RingReader


class TracerMaps:
    """A session's spare tracer map sets (owned here until lent)."""

    def __init__(self, spare: int = SPARE_SETS) -> None:
        self.spare = spare
        self._free: list[MapSet] = []
        self._lock = threading.Lock()
        self._closed = False
        #: The session's tracer programs as libbpf first loaded them (`TracerImages`).
        self.images = TracerImages()

    def lend(self) -> MapSet | None:
        """A spare set, now the caller's until `give_back` or `discard` (None: none spare)."""
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, spare: MapSet) -> None:
        """Keep `spare` (the caller's, clean: its ring read to the end, its tgid
        hash empty) for the next hook set; close it when enough are spare."""
        with self._lock:
            keep = not self._closed and len(self._free) < self.spare
            if keep:
                self._free.append(spare)
        if not keep:
            self.discard(spare)

    @staticmethod
    def discard(spare: MapSet) -> None:
        """Close a set that may not serve again (lent, or the caller's own)."""
        spare.ring.close()
        for fd in spare.fds.values():
            os.close(fd)

    def close(self) -> None:
        """Close every spare set (idempotent); sets given back later are closed."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for spare in free:
            self.discard(spare)
        self.images.close()

    def __len__(self) -> int:
        return len(self._free)


# -- the tracer's programs, loaded again (`TracerImage`) --------------------

#: uapi enum bpf_cmd.
_BPF_MAP_CREATE, _BPF_PROG_LOAD, _BPF_BTF_GET_FD_BY_ID = 0, 5, 19
_BTF_KIND_FUNC = 12
#: Images kept per session: one per (program, config); a session uses one or two.
_MAX_IMAGES = 8
#: The hook set's own maps (HookSet keys), made anew for each set (`HookSet` shares
#: the others: the session lends them, `tracer_maps.POOLED`).
SET_MAPS = ("lost", "armed", "cgroup")


class _ProgLoadAttr(Structure):
    """`union bpf_attr` for BPF_PROG_LOAD (uapi linux/bpf.h), up to attach_prog_fd."""

    _fields_ = [
        ("prog_type", c_uint32),
        ("insn_cnt", c_uint32),
        ("insns", c_uint64),
        ("license", c_uint64),
        ("log_level", c_uint32),
        ("log_size", c_uint32),
        ("log_buf", c_uint64),
        ("kern_version", c_uint32),
        ("prog_flags", c_uint32),
        ("prog_name", c_char * 16),
        ("prog_ifindex", c_uint32),
        ("expected_attach_type", c_uint32),
        ("prog_btf_fd", c_uint32),
        ("func_info_rec_size", c_uint32),
        ("func_info", c_uint64),
        ("func_info_cnt", c_uint32),
        ("line_info_rec_size", c_uint32),
        ("line_info", c_uint64),
        ("line_info_cnt", c_uint32),
        ("attach_btf_id", c_uint32),
        ("attach_prog_fd", c_uint32),
    ]


class _MapCreateAttr(Structure):
    """`union bpf_attr` for BPF_MAP_CREATE, up to btf_vmlinux_value_type_id."""

    _fields_ = [
        ("map_type", c_uint32),
        ("key_size", c_uint32),
        ("value_size", c_uint32),
        ("max_entries", c_uint32),
        ("map_flags", c_uint32),
        ("inner_map_fd", c_uint32),
        ("numa_node", c_uint32),
        ("map_name", c_char * 16),
        ("map_ifindex", c_uint32),
        ("btf_fd", c_uint32),
        ("btf_key_type_id", c_uint32),
        ("btf_value_type_id", c_uint32),
        ("btf_vmlinux_value_type_id", c_uint32),
    ]


class _BtfGetFdAttr(Structure):
    _fields_ = [("btf_id", c_uint32), ("next_id", c_uint32), ("open_flags", c_uint32)]


@dataclass
class _SetMap:
    """How to make one of a hook set's own maps: the first load's, as it was made."""

    info: bpf_map_info
    #: Key 0's value right after libbpf's load (None: the map type has no user lookup).
    initial: bytes | None


@dataclass
class TracerImage:
    """One tracer program as libbpf's first load gave it to the kernel; `load` gives
    it again for another target. Holds fds: `close`.

    A session hooks each program it traces (`program_exits`), so a suite that loads
    its program per test loads a tracer per test. Through libbpf each load opens the
    object from its ELF and reuses the session's maps (`bpf_map__reuse_fd()` opens
    "/": a round trip to the host on the guests' 9p root), yet two such loads differ
    only in their attach target and in the hook set's own maps. So after libbpf's
    first load of a program with a config, the session keeps what libbpf gave the
    kernel: the relocated instructions and the map each ld_imm64 loads, the object's
    BTF (an fd) and the program's function and line info (from the object's
    .BTF.ext, as libbpf passes them for a program with no subprograms). `load` gives
    the kernel the same for a new target, with the hook set's maps in place: one
    BPF_PROG_LOAD (the verifier) instead of an open and a load. Whatever it cannot
    do the same way (a program calling subprograms or kfuncs, a ld_imm64 of anything
    but a map) makes no image, and the hook set loads through libbpf as before.
    """

    name: bytes
    prog_type: int
    attach_type: int
    license: bytes
    insns: bytes
    #: ld_imm64 instruction index -> the map it loads (a HookSet key, or "rodata").
    maps: dict[int, str]
    btf_fd: int
    rodata_fd: int
    func_info: tuple[bytes, int, int]
    line_info: tuple[bytes, int, int]
    set_maps: dict[str, _SetMap] = field(default_factory=dict)
    #: Programs loaded from this image so far.
    loads: int = 0

    def new_set_maps(self) -> dict[str, int]:
        """A hook set's own maps (`SET_MAPS`), made as libbpf made the first set's; the
        caller closes the fds. Raises BpfError."""
        made: dict[str, int] = {}
        try:
            for key, spec in self.set_maps.items():
                made[key] = _create_map(spec, self.btf_fd)
        except BaseException:
            for fd in made.values():
                os.close(fd)
            raise
        return made

    def load(self, fds: dict[str, int], attach_fd: int, func: str) -> int:
        """The program loaded with `fds` (HookSet keys -> map fds) for its maps, to
        attach to function `func` of the BPF program behind `attach_fd`; its fd. Raises
        BpfError where the kernel refuses (the caller loads through libbpf instead,
        which says why)."""
        code = bytearray(self.insns)
        for index, key in self.maps.items():
            fd = self.rodata_fd if key == "rodata" else fds[key]
            struct.pack_into("<i", code, index * 8 + 4, fd)
        insns = ctypes.create_string_buffer(bytes(code), len(code))
        license = ctypes.create_string_buffer(self.license)
        funcs = ctypes.create_string_buffer(self.func_info[0], len(self.func_info[0]) or 1)
        lines = ctypes.create_string_buffer(self.line_info[0], len(self.line_info[0]) or 1)
        attr = _ProgLoadAttr(
            prog_type=self.prog_type,
            insn_cnt=len(code) // 8,
            insns=ctypes.addressof(insns),
            license=ctypes.addressof(license),
            prog_name=self.name[:15],
            expected_attach_type=self.attach_type,
            prog_btf_fd=self.btf_fd,
            func_info_rec_size=self.func_info[1],
            func_info=ctypes.addressof(funcs) if self.func_info[2] else 0,
            func_info_cnt=self.func_info[2],
            line_info_rec_size=self.line_info[1],
            line_info=ctypes.addressof(lines) if self.line_info[2] else 0,
            line_info_cnt=self.line_info[2],
            attach_btf_id=_prog_func_id(attach_fd, func),
            attach_prog_fd=attach_fd,
        )
        for _ in range(5):  # libbpf's bpf_prog_load retries EAGAIN as often
            ret = sys_bpf(_BPF_PROG_LOAD, attr)
            if ret != -errno.EAGAIN:
                break
        fd = check_int(ret, f"load {self.name.decode()} again")
        self.loads += 1
        return fd

    def close(self) -> None:
        """Release the BTF and .rodata fds (idempotent)."""
        for fd in (self.btf_fd, self.rodata_fd):
            if fd >= 0:
                os.close(fd)
        self.btf_fd = self.rodata_fd = -1


class TracerImages:
    """A session's `TracerImage`s, by (program name, config bytes); `close` releases them."""

    def __init__(self) -> None:
        self._images: dict[tuple[str, bytes], TracerImage | None] = {}

    def get(self, program: str, config: bytes) -> TracerImage | None:
        """The image of `program` loaded with `config` (None: none yet, or none possible)."""
        return self._images.get((program, config))

    def known(self, program: str, config: bytes) -> bool:
        """Whether `remember` was asked for this program and config already."""
        return (program, config) in self._images

    def remember(
        self, program: str, config: bytes, obj: int, prog: int, image: bytes, keys: dict[str, bytes]
    ) -> None:
        """Keep what libbpf's load of `prog` (in object `obj`, opened from ELF `image`,
        its maps named in the ELF as `keys` says: HookSet key -> name) gave the kernel.
        A program it cannot load the same way is remembered as None (libbpf loads it)."""
        try:
            made = _image_of(program, obj, prog, image, keys)
        except (BpfError, OSError, ValueError):
            made = None
        old = self._images.pop((program, config), None)
        if old is not None:
            old.close()
        self._images[(program, config)] = made
        while len(self._images) > _MAX_IMAGES:
            first = self._images.pop(next(iter(self._images)))
            if first is not None:
                first.close()

    @property
    def loads(self) -> int:
        """Programs loaded from the images kept now (`TracerImage.loads`)."""
        return sum(image.loads for image in self._images.values() if image is not None)

    def close(self) -> None:
        """Release every image's fds (idempotent)."""
        while self._images:
            image = self._images.popitem()[1]
            if image is not None:
                image.close()


def _image_of(
    program: str, obj: int, prog: int, image: bytes, keys: dict[str, bytes]
) -> TracerImage | None:
    """The `TracerImage` of a loaded program, or None where a load from it would not be
    the same as libbpf's."""
    count = lib.bpf_program__insn_cnt(prog)
    insns = ctypes.string_at(lib.bpf_program__insns(prog), count * 8)
    fd_key: dict[int, str] = {}
    for key, name in {**keys, "rodata": b".rodata"}.items():
        m = lib.bpf_object__find_map_by_name(obj, name)
        if m:
            fd_key[lib.bpf_map__fd(m)] = key
    maps: dict[int, str] = {}
    index = 0
    while index < count:
        code, regs, _off, imm = struct.unpack_from("<BBhi", insns, index * 8)
        src = regs >> 4
        if code == LD_IMM64:
            if src in (PSEUDO_MAP_FD, PSEUDO_MAP_VALUE) and imm in fd_key:
                maps[index] = fd_key[imm]
            elif src != 0:
                return None  # a kernel symbol, a function's address: libbpf's to resolve
            index += 2
            continue
        if code == CALL and src != 0:
            return None  # a subprogram (its info would be appended) or a kfunc
        index += 1
    found = _object_lines(image)
    funcs, lines = found.packed(lib.bpf_program__section_name(prog).decode())
    info, _ = prog_info(lib.bpf_program__fd(prog))
    rodata = lib.bpf_object__find_map_by_name(obj, b".rodata")
    license = found.license or None
    if not info.btf_id or funcs[2] != 1 or rodata is None or license is None:
        return None
    set_maps: dict[str, _SetMap] = {}
    for key in SET_MAPS:
        fd = next((f for f, k in fd_key.items() if k == key), None)
        if fd is None:
            return None
        set_maps[key] = spec = _set_map(fd)
        if spec.info.btf_id not in (0, info.btf_id):
            return None  # made with another BTF than the object's
    btf_fd = _btf_fd(info.btf_id)
    try:
        rodata_fd = os.dup(lib.bpf_map__fd(rodata))
    except OSError:
        os.close(btf_fd)
        raise
    return TracerImage(
        name=program.encode(),
        prog_type=lib.bpf_program__type(prog),
        attach_type=lib.bpf_program__expected_attach_type(prog),
        license=license,
        insns=insns,
        maps=maps,
        btf_fd=btf_fd,
        rodata_fd=rodata_fd,
        func_info=funcs,
        line_info=lines,
        set_maps=set_maps,
    )


def _btf_fd(btf_id: int) -> int:
    """An fd of BTF object `btf_id` (the loaded program's: the object's BTF)."""
    return check_int(sys_bpf(_BPF_BTF_GET_FD_BY_ID, _BtfGetFdAttr(btf_id=btf_id)), "get BTF fd")


def _set_map(fd: int) -> _SetMap:
    """How map `fd` was made, and key 0's value now (for an array: its initial value)."""
    info = bpf_map_info()
    size = c_uint32(ctypes.sizeof(info))
    check_int(lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "map info")
    initial = None
    if info.key_size == 4 and info.max_entries == 1:
        key, value = c_uint32(0), ctypes.create_string_buffer(info.value_size)
        if lib.bpf_map_lookup_elem(fd, ctypes.byref(key), value) == 0:
            initial = value.raw
    return _SetMap(info, initial)


def _create_map(spec: _SetMap, btf_fd: int) -> int:
    """A new map made as `spec` says, with its initial value."""
    info = spec.info
    attr = _MapCreateAttr(
        map_type=info.type,
        key_size=info.key_size,
        value_size=info.value_size,
        max_entries=info.max_entries,
        map_flags=info.map_flags,
        map_name=info.name,
        btf_fd=btf_fd if info.btf_id else 0,
        btf_key_type_id=info.btf_key_type_id,
        btf_value_type_id=info.btf_value_type_id,
        btf_vmlinux_value_type_id=info.btf_vmlinux_value_type_id,
    )
    fd = check_int(sys_bpf(_BPF_MAP_CREATE, attr), f"create map {info.name.decode()}")
    if spec.initial is not None and any(spec.initial):
        key = c_uint32(0)
        value = ctypes.create_string_buffer(spec.initial, len(spec.initial))
        ret = lib.bpf_map_update_elem(fd, ctypes.byref(key), value, 0)
        if ret < 0:
            os.close(fd)
            check_int(ret, f"set map {info.name.decode()}")
    return fd


def _prog_func_id(prog_fd: int, func: str) -> int:
    """The BTF id of function `func` in the BTF of the program behind `prog_fd`, as
    libbpf finds it for `bpf_program__set_attach_target`."""
    info, _ = prog_info(prog_fd)
    btf = lib.btf__load_from_kernel_by_id(info.btf_id) if info.btf_id else None
    if not btf or lib.libbpf_get_error(btf):
        raise BpfError(errno.ESRCH, f"read the BTF of the program to attach to ({func})")
    try:
        found = lib.btf__find_by_name_kind(btf, func.encode(), _BTF_KIND_FUNC)
    finally:
        lib.btf__free(btf)
    if found <= 0:
        raise BpfError(errno.ESRCH, f"{func} is not in its program's BTF")
    return int(found)


@functools.lru_cache(maxsize=4)
def _object_lines(image: bytes) -> ObjectLines:
    """The packaged tracer object's function and line records and licence (read once)."""
    return object_lines(image)
