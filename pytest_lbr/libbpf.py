"""Thin, typed ctypes bindings to the system's libbpf.so.1.

All prototypes live here. Two checkers turn libbpf's conventions into
exceptions: negative errno for ints (`check_int`) and NULL + errno for pointers
(`check_ptr`). Higher layers (`pytest_lbr.bpf`, `pytest_lbr.capture`,
`pytest_lbr.symbols`) wrap the handles in context managers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any

__all__ = [
    "BpfError",
    "LibbpfMissing",
    "bpf_prog_info",
    "check_int",
    "check_ptr",
    "lib",
    "prog_info",
]

BPF_TAG_SIZE = 8
BPF_OBJ_NAME_LEN = 16


class LibbpfMissing(OSError):
    """libbpf.so.1 is not installed (Debian: apt-get install libbpf1)."""


class BpfError(OSError):
    """A libbpf call failed; `errno` and `strerror` are set, `log` may hold the verifier log."""

    def __init__(self, err: int, what: str, log: str = "") -> None:
        super().__init__(err, f"{what}: {os.strerror(err)}")
        self.what = what
        self.log = log


def check_int(ret: int, what: str) -> int:
    """libbpf int convention: negative errno on failure (older APIs: -1 + errno)."""
    if ret < 0:
        err = -ret if ret != -1 else (ctypes.get_errno() or errno.EPERM)
        raise BpfError(err, what)
    return ret


def check_ptr(ptr: int | None, what: str) -> int:
    """libbpf pointer convention: NULL + errno on failure."""
    if not ptr:
        raise BpfError(ctypes.get_errno() or errno.EINVAL, what)
    return ptr


def _load() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise LibbpfMissing(
            errno.ENOENT, f"cannot load libbpf ({name}): {exc}; install libbpf1 (apt-get install libbpf1)"
        ) from None


class bpf_prog_info(Structure):  # noqa: N801 -- uapi name
    """`struct bpf_prog_info` from uapi linux/bpf.h (Linux 6.1 layout)."""

    _fields_ = [
        ("type", c_uint32),
        ("id", c_uint32),
        ("tag", c_uint8 * BPF_TAG_SIZE),
        ("jited_prog_len", c_uint32),
        ("xlated_prog_len", c_uint32),
        ("jited_prog_insns", c_uint64),
        ("xlated_prog_insns", c_uint64),
        ("load_time", c_uint64),
        ("created_by_uid", c_uint32),
        ("nr_map_ids", c_uint32),
        ("map_ids", c_uint64),
        ("name", c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", c_uint32),
        ("gpl_compatible", c_uint32),
        ("netns_dev", c_uint64),
        ("netns_ino", c_uint64),
        ("nr_jited_ksyms", c_uint32),
        ("nr_jited_func_lens", c_uint32),
        ("jited_ksyms", c_uint64),
        ("jited_func_lens", c_uint64),
        ("btf_id", c_uint32),
        ("func_info_rec_size", c_uint32),
        ("func_info", c_uint64),
        ("nr_func_info", c_uint32),
        ("nr_line_info", c_uint32),
        ("line_info", c_uint64),
        ("jited_line_info", c_uint64),
        ("nr_jited_line_info", c_uint32),
        ("line_info_rec_size", c_uint32),
        ("jited_line_info_rec_size", c_uint32),
        ("nr_prog_tags", c_uint32),
        ("prog_tags", c_uint64),
        ("run_time_ns", c_uint64),
        ("run_cnt", c_uint64),
        ("recursion_misses", c_uint64),
        ("verified_insns", c_uint32),
        ("attach_btf_obj_id", c_uint32),
        ("attach_btf_id", c_uint32),
        ("_pad", c_uint32),
    ]


class _Lib:
    """Lazily loaded libbpf with prototypes declared once."""

    def __init__(self) -> None:
        self._cdll: ctypes.CDLL | None = None

    def __getattr__(self, name: str) -> Any:
        if self._cdll is None:
            self._cdll = _load()
            _declare(self._cdll)
        return getattr(self._cdll, name)


def _proto(cdll: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> None:
    fn = getattr(cdll, name, None)
    if fn is None:  # older libbpf: the caller reports the missing feature
        return
    fn.restype = restype
    fn.argtypes = list(argtypes)


def _declare(cdll: ctypes.CDLL) -> None:
    _proto(cdll, "libbpf_get_error", ctypes.c_long, c_void_p)
    _proto(cdll, "bpf_obj_get_info_by_fd", c_int, c_int, c_void_p, POINTER(c_uint32))
    _proto(cdll, "bpf_prog_get_fd_by_id", c_int, c_uint32)
    _proto(cdll, "bpf_prog_get_next_id", c_int, c_uint32, POINTER(c_uint32))
    _proto(cdll, "bpf_obj_get", c_int, c_char_p)
    _proto(cdll, "btf__load_from_kernel_by_id", c_void_p, c_uint32)
    _proto(cdll, "btf__load_vmlinux_btf", c_void_p)
    _proto(cdll, "btf__free", None, c_void_p)
    _proto(cdll, "btf__str_by_offset", c_char_p, c_void_p, c_uint32)
    _proto(cdll, "btf__type_by_id", c_void_p, c_void_p, c_uint32)
    _proto(cdll, "btf__find_by_name_kind", c_int, c_void_p, c_char_p, c_uint32)
    _proto(cdll, "btf__type_cnt", c_uint32, c_void_p)
    _proto(cdll, "libbpf_set_print", c_void_p, c_void_p)
    _proto(cdll, "libbpf_num_possible_cpus", c_int)
    _proto(cdll, "libbpf_probe_bpf_helper", c_int, c_int, c_int, c_void_p)
    _proto(cdll, "libbpf_major_version", c_uint32)
    _proto(cdll, "libbpf_minor_version", c_uint32)
    _proto(cdll, "libbpf_strerror", c_int, c_int, c_char_p, c_size_t)


#: The libbpf handle: `lib.bpf_prog_get_fd_by_id(7)`. Loaded on first use.
lib: Any = _Lib()


def prog_info(fd: int, **arrays: tuple[str, int, Any]) -> tuple[bpf_prog_info, dict[str, Any]]:
    """BPF_OBJ_GET_INFO_BY_FD for a program, optionally filling variable arrays.

    `arrays` maps a pointer field to (count field, element count, ctypes element
    type), e.g. ``jited_ksyms=("nr_jited_ksyms", n, c_uint64)``; the second
    result maps each pointer field to its filled ctypes array. Call once without
    arrays to learn the counts.
    """
    info = bpf_prog_info()
    size = c_uint32(ctypes.sizeof(info))
    bufs: dict[str, Any] = {}
    for field, (count_field, count, ctype) in arrays.items():
        buf = (ctype * max(count, 1))()
        bufs[field] = buf
        setattr(info, field, ctypes.addressof(buf))
        setattr(info, count_field, count)
    check_int(lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "bpf_obj_get_info_by_fd")
    return info, bufs
