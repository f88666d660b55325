"""The LBR tracer object shipped in the package, and the record layout read from its BTF.

The wheel carries `pytest_lbr/objects/lbr_tracer.<arch>.bpf.o`, built from
`bpf/lbr_tracer.bpf.c` when the wheel is built (BPF bytecode is architecture
neutral; only the PT_REGS accessors differ per arch). The constants user space
needs (record type tag, flag bits, branch entries per hit) are enums and array
sizes in that object's BTF, so the layout always matches the object actually
loaded, and nothing is read before the first trace asks for it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pytest_lbr.bpf.libbpf import BpfError, lib

__all__ = [
    "MIN_CLANG",
    "TracerLayout",
    "clang_version",
    "clang_version_problem",
    "install_problem",
    "object_arch",
    "tracer_image",
    "tracer_layout",
    "tracer_not_built",
    "tracer_object",
]

#: The oldest clang that builds the tracer (bpf/flags.mk): libbpf-bootstrap's
#: minimum for BPF objects like it (BTF-defined maps, global data, CO-RE).
MIN_CLANG = 11

#: platform.machine() -> the arch name of bpf_tracing.h (`__TARGET_ARCH_<name>`).
_ARCHES = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm64", "arm64": "arm64"}

_BTF_KIND_ARRAY = 3
_BTF_KIND_STRUCT = 4
_BTF_KIND_ENUM = 6


def object_arch(machine: str | None = None) -> str:
    """The tracer object's arch name for this machine (`x86`, `arm64`)."""
    machine = machine or platform.machine()
    return _ARCHES.get(machine.lower(), machine.lower())


@functools.cache
def tracer_object(machine: str | None = None) -> Path:
    """Path of the packaged tracer object for this machine's architecture.

    Raises FileNotFoundError naming the file when this install has none (an
    architecture the wheel was not built for, or a source tree where
    `make -C bpf` has not run). Found once per process (every hook set asks, and
    a stat on a guest's 9p root is a round trip to the host); a miss is not remembered.
    """
    name = f"lbr_tracer.{object_arch(machine)}.bpf.o"
    path = Path(str(resources.files("pytest_lbr").joinpath("objects", name)))
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "LBR tracer object not in this install", str(path))
    return path


@functools.cache
def tracer_image(path: Path) -> bytes:
    """The bytes of the tracer object at `path`, read once per process.

    Every hook set opens the object from memory (`bpf_object__open_mem`): a
    virtme-ng guest's root is 9p without a page cache, where libbpf's reads of
    the file were nearly all of an open.
    """
    return path.read_bytes()


@dataclass(frozen=True)
class TracerLayout:
    """What user space must know of the tracer's records, from the object's BTF."""

    constants: dict[str, int]
    """Every `LBR_*` enum value (record type, hook kinds, flags, limits)."""
    hit_size: int
    """sizeof(struct lbr_hit)."""
    max_entries: int
    """Branch entries one hit carries (length of struct lbr_hit.entries)."""


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class _BtfEnum(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("val", ctypes.c_int32)]


class _BtfMember(ctypes.Structure):
    _fields_ = [
        ("name_off", ctypes.c_uint32),
        ("type", ctypes.c_uint32),
        ("offset", ctypes.c_uint32),
    ]


class _BtfArray(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("index_type", ctypes.c_uint32),
        ("nelems", ctypes.c_uint32),
    ]


@functools.cache
def tracer_layout(path: Path | None = None) -> TracerLayout:
    """Read the layout from the tracer object's BTF (once per object)."""
    path = path or tracer_object()
    btf = lib.btf__parse_elf(str(path).encode(), None)
    if not btf or lib.libbpf_get_error(btf):
        raise BpfError(ctypes.get_errno() or errno.EINVAL, f"read BTF of {path}")
    try:
        constants: dict[str, int] = {}
        hit_size = max_entries = 0
        for type_id in range(1, lib.btf__type_cnt(btf)):
            addr = lib.btf__type_by_id(btf, type_id)
            t = _BtfType.from_address(addr)
            kind, vlen = (t.info >> 24) & 0x1F, t.info & 0xFFFF
            name = lib.btf__str_by_offset(btf, t.name_off).decode()
            if kind == _BTF_KIND_ENUM and name.startswith("lbr_"):
                values = (_BtfEnum * vlen).from_address(addr + ctypes.sizeof(_BtfType))
                for v in values:
                    constants[lib.btf__str_by_offset(btf, v.name_off).decode()] = v.val
            elif kind == _BTF_KIND_STRUCT and name == "lbr_hit":
                hit_size = t.size
                members = (_BtfMember * vlen).from_address(addr + ctypes.sizeof(_BtfType))
                entries = next(
                    m for m in members if lib.btf__str_by_offset(btf, m.name_off) == b"entries"
                )
                arr_addr = lib.btf__type_by_id(btf, entries.type)
                arr_kind = (_BtfType.from_address(arr_addr).info >> 24) & 0x1F
                if arr_kind == _BTF_KIND_ARRAY:
                    max_entries = _BtfArray.from_address(arr_addr + ctypes.sizeof(_BtfType)).nelems
    finally:
        lib.btf__free(btf)
    if not hit_size or not max_entries or "LBR_RECORD_HIT" not in constants:
        raise BpfError(errno.EINVAL, f"{path}: no struct lbr_hit / LBR_* enums in its BTF")
    return TracerLayout(constants, hit_size, max_entries)


def clang_version(clang: str = "clang") -> tuple[int, int, int] | None:
    """`clang --version` as (major, minor, patch); None when clang is not installed."""
    path = shutil.which(clang)
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", out)
    if m is None:
        return None
    return int(m[1]), int(m[2]), int(m[3])


def clang_version_problem(version: tuple[int, int, int] | None) -> str:
    """One actionable line when `version` cannot build the tracer, else ""."""
    if version is None:
        return "clang is not installed: it builds the LBR tracer (apt-get install clang)"
    if version[0] >= MIN_CLANG:
        return ""
    have = ".".join(map(str, version))
    return (
        f"clang {have} is too old to build the LBR tracer: pytest-lbr needs clang >= "
        f"{MIN_CLANG} (apt-get install clang-14, then make -C bpf CLANG=clang-14)"
    )


def tracer_not_built(missing: str) -> str:
    """Why there is no tracer object at `missing`: the fix, and clang's problem if it has one."""
    msg = (
        f"LBR tracer object missing from this install: {missing} "
        f"(reinstall pytest-lbr; in a source tree run: make -C bpf)"
    )
    problem = clang_version_problem(clang_version())
    return f"{msg}; {problem}" if problem else msg


def install_problem(machine: str | None = None) -> str:
    """Why this install cannot trace fully (one line with the fix), or "" when it can.

    Without the tracer object the graph backend still records calls, but no
    return values (its fexit hooks are this object) and the LBR backend nothing:
    a session must stop at its start rather than hand such traces to tests.
    """
    try:
        tracer_object(machine)
    except FileNotFoundError as exc:
        missing = str(exc.filename)
    else:
        return ""
    package = Path(str(resources.files("pytest_lbr")))
    checkout = package.parent
    if (checkout / "setup.py").is_file() and (checkout / "bpf" / "Makefile").is_file():
        # `python -m pytest` in a checkout imports the checkout's pytest_lbr (the
        # working directory comes first on sys.path), whose objects are built only
        # by `make -C bpf` or an editable install.
        return (
            f"pytest_lbr imported from the source tree {checkout} has no LBR tracer "
            f"object ({missing}): build it there (make -C {checkout / 'bpf'}, or pip "
            f"install -e {checkout}), or run the installed pytest-lbr (pytest, or python "
            f"-P -m pytest)"
        )
    return tracer_not_built(missing)
