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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from ctypes import (
    POINTER,
    Structure,
    c_bool,
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
    "BpfLinkCreateOpts",
    "NetfilterLinkCreateAttr",
    "BpfTcHook",
    "BpfTcOpts",
    "BpfXdpQueryOpts",
    "KprobeMultiOpts",
    "KprobeOpts",
    "ObjectOpenOpts",
    "TracepointOpts",
    "UprobeOpts",
    "BpfError",
    "MIN_LIBBPF",
    "LibbpfMissing",
    "bpf_link_info",
    "bpf_prog_info",
    "check_int",
    "bpf_iter_attach_opts",
    "bpf_test_run_opts",
    "check_ptr",
    "libbpf_messages",
    "libbpf_version",
    "libbpf_version_problem",
    "lib",
    "prog_info",
    "sys_bpf",
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
            errno.ENOENT,
            f"cannot load libbpf ({name}): {exc}; install libbpf1 (apt-get install libbpf1)",
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


# -- option structs of the attach calls (prefixes of libbpf.h's; `sz` says how much we set) --


class bpf_func_info(Structure):  # noqa: N801 -- uapi name
    """`struct bpf_func_info`: where each function of a program starts, and its BTF type."""

    _fields_ = [("insn_off", c_uint32), ("type_id", c_uint32)]


class bpf_line_info(Structure):  # noqa: N801 -- uapi name
    """`struct bpf_line_info`: one source line record of a program."""

    _fields_ = [
        ("insn_off", c_uint32),
        ("file_name_off", c_uint32),
        ("line_off", c_uint32),
        ("line_col", c_uint32),
    ]


class btf_type(Structure):  # noqa: N801 -- uapi name
    """`struct btf_type` (its fixed head; `size`/`type` is a union)."""

    _fields_ = [("name_off", c_uint32), ("info", c_uint32), ("size", c_uint32)]


class btf_member(Structure):  # noqa: N801 -- uapi name
    """`struct btf_member`: one of the `vlen` that follow a struct's or union's `btf_type`.

    `offset` is in bits; where the struct's kind_flag is set its low 24 bits are
    the bit offset and its high 8 the bitfield size (0: not a bitfield).
    """

    _fields_ = [("name_off", c_uint32), ("type", c_uint32), ("offset", c_uint32)]


class ObjectOpenOpts(Structure):
    """struct bpf_object_open_opts (libbpf.h), up to the object's name."""

    _fields_ = [("sz", c_size_t), ("object_name", c_char_p)]


class KprobeOpts(Structure):
    """struct bpf_kprobe_opts (libbpf.h)."""

    _fields_ = [
        ("sz", c_size_t),
        ("bpf_cookie", c_uint64),
        ("offset", c_size_t),
        ("retprobe", c_bool),
    ]


class KprobeMultiOpts(Structure):
    """struct bpf_kprobe_multi_opts (libbpf.h)."""

    _fields_ = [
        ("sz", c_size_t),
        ("syms", POINTER(c_char_p)),
        ("addrs", c_void_p),
        ("cookies", POINTER(c_uint64)),
        ("cnt", c_size_t),
        ("retprobe", c_bool),
    ]


class TracepointOpts(Structure):
    """struct bpf_tracepoint_opts (libbpf.h)."""

    _fields_ = [("sz", c_size_t), ("bpf_cookie", c_uint64)]


class UprobeOpts(Structure):
    """struct bpf_uprobe_opts (libbpf.h)."""

    _fields_ = [
        ("sz", c_size_t),
        ("ref_ctr_offset", c_size_t),
        ("bpf_cookie", c_uint64),
        ("retprobe", c_bool),
        ("func_name", c_char_p),
    ]


class bpf_link_info(Structure):  # noqa: N801 -- uapi name
    """`struct bpf_link_info`: its common head (the kernel fills what fits)."""

    _fields_ = [("type", c_uint32), ("id", c_uint32), ("prog_id", c_uint32)]


# -- real attachment to network interfaces (pytest_lbr.bpf: Program.attach_xdp / attach_tc) --

#: uapi enum bpf_attach_type: BPF_XDP (a BPF link on an interface, Linux >= 5.9).
BPF_XDP = 37
#: uapi linux/if_link.h: XDP_FLAGS_SKB_MODE (generic), XDP_FLAGS_DRV_MODE (driver).
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
#: uapi linux/if_link.h: what IFLA_XDP_ATTACHED (bpf_xdp_query's attach_mode) says.
XDP_ATTACHED_MODES = {0: "none", 1: "driver", 2: "generic", 3: "hw", 4: "multi"}
#: libbpf.h enum bpf_tc_attach_point.
BPF_TC_INGRESS = 1 << 0
BPF_TC_EGRESS = 1 << 1


class BpfLinkCreateOpts(Structure):
    """struct bpf_link_create_opts (bpf.h), its prefix: `flags` (for XDP: the mode)."""

    _fields_ = [("sz", c_size_t), ("flags", c_uint32)]


#: uapi enum bpf_prog_type / bpf_attach_type values libbpf 1.1 has no names for
#: (pytest_lbr.bpf.attach: tcx and netfilter links).
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PROG_TYPE_NETFILTER = 32  # Linux >= 6.4
BPF_NETFILTER = 45  # Linux >= 6.4
BPF_TCX_INGRESS = 46  # Linux >= 6.6
BPF_TCX_EGRESS = 47
#: uapi enum bpf_cmd: BPF_LINK_CREATE.
BPF_LINK_CREATE = 28
#: __NR_bpf per machine (uname -m), for bpf(2) commands libbpf 1.1 cannot build.
_NR_BPF = {"x86_64": 321, "aarch64": 280}


class NetfilterLinkCreateAttr(Structure):
    """`union bpf_attr`'s `link_create` for a netfilter link (uapi linux/bpf.h, Linux
    >= 6.4): prog_fd, target_fd (0), attach_type (BPF_NETFILTER), flags (0), then the
    `netfilter` member at offset 16: pf, hooknum, priority (signed), flags. 32 bytes;
    the kernel takes a shorter `bpf_attr` and zeroes the rest. libbpf 1.1's
    bpf_link_create has no netfilter options, so this goes to bpf(2) itself."""

    _fields_ = [
        ("prog_fd", c_uint32),
        ("target_fd", c_uint32),
        ("attach_type", c_uint32),
        ("flags", c_uint32),
        ("pf", c_uint32),
        ("hooknum", c_uint32),
        ("priority", ctypes.c_int32),
        ("netfilter_flags", c_uint32),
    ]


def sys_bpf(cmd: int, attr: Structure) -> int:
    """bpf(2) itself: `cmd` on `attr` (its size as the length). The result (an fd for
    BPF_LINK_CREATE), or -errno."""
    nr = _NR_BPF.get(os.uname().machine)
    if nr is None:
        return -errno.ENOSYS
    syscall = _LIBC_ERRNO.syscall
    ret = syscall(ctypes.c_long(nr), ctypes.c_int(cmd), ctypes.byref(attr),
                  ctypes.c_uint(ctypes.sizeof(attr)))  # fmt: skip
    return int(ret) if ret >= 0 else -(ctypes.get_errno() or errno.EINVAL)


class BpfXdpQueryOpts(Structure):
    """struct bpf_xdp_query_opts (libbpf.h, 1.1 layout): outputs of bpf_xdp_query."""

    _fields_ = [
        ("sz", c_size_t),
        ("prog_id", c_uint32),
        ("drv_prog_id", c_uint32),
        ("hw_prog_id", c_uint32),
        ("skb_prog_id", c_uint32),
        ("attach_mode", c_uint8),
    ]


class BpfTcHook(Structure):
    """struct bpf_tc_hook (libbpf.h): an interface's clsact ingress or egress hook."""

    _fields_ = [
        ("sz", c_size_t),
        ("ifindex", c_int),
        ("attach_point", c_int),
        ("parent", c_uint32),
    ]


class BpfTcOpts(Structure):
    """struct bpf_tc_opts (libbpf.h): the filter; bpf_tc_attach fills handle, priority, prog_id."""

    _fields_ = [
        ("sz", c_size_t),
        ("prog_fd", c_int),
        ("flags", c_uint32),
        ("prog_id", c_uint32),
        ("handle", c_uint32),
        ("priority", c_uint32),
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
    _proto(cdll, "bpf_map_get_fd_by_id", c_int, c_uint32)
    _proto(cdll, "bpf_prog_get_next_id", c_int, c_uint32, POINTER(c_uint32))
    _proto(cdll, "bpf_obj_get", c_int, c_char_p)
    _proto(cdll, "bpf_obj_pin", c_int, c_int, c_char_p)
    _proto(cdll, "btf__load_from_kernel_by_id", c_void_p, c_uint32)
    _proto(cdll, "btf__load_vmlinux_btf", c_void_p)
    _proto(cdll, "btf__free", None, c_void_p)
    _proto(cdll, "btf__parse_elf", c_void_p, c_char_p, c_void_p)
    _proto(cdll, "btf__new", c_void_p, c_void_p, c_uint32)
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
    # Objects, programs and maps (pytest_lbr.bpf).
    _proto(cdll, "bpf_object__open_file", c_void_p, c_char_p, c_void_p)
    _proto(cdll, "bpf_object__open_mem", c_void_p, c_void_p, c_size_t, c_void_p)
    _proto(cdll, "bpf_object__load", c_int, c_void_p)
    _proto(cdll, "bpf_object__close", None, c_void_p)
    _proto(cdll, "bpf_object__next_program", c_void_p, c_void_p, c_void_p)
    _proto(cdll, "bpf_object__next_map", c_void_p, c_void_p, c_void_p)
    _proto(cdll, "bpf_program__name", c_char_p, c_void_p)
    _proto(cdll, "bpf_program__fd", c_int, c_void_p)
    _proto(cdll, "bpf_program__type", c_int, c_void_p)
    _proto(cdll, "bpf_program__set_type", c_int, c_void_p, c_int)
    _proto(cdll, "bpf_program__set_expected_attach_type", c_int, c_void_p, c_int)
    _proto(cdll, "bpf_program__insns", c_void_p, c_void_p)
    _proto(cdll, "bpf_program__insn_cnt", c_size_t, c_void_p)
    _proto(cdll, "libbpf_bpf_prog_type_str", c_char_p, c_int)
    _proto(cdll, "bpf_map__name", c_char_p, c_void_p)
    _proto(cdll, "bpf_map__fd", c_int, c_void_p)
    _proto(cdll, "bpf_map__type", c_int, c_void_p)
    _proto(cdll, "bpf_map__key_size", c_uint32, c_void_p)
    _proto(cdll, "bpf_map__value_size", c_uint32, c_void_p)
    _proto(cdll, "bpf_map__max_entries", c_uint32, c_void_p)
    _proto(cdll, "bpf_map_lookup_elem", c_int, c_int, c_void_p, c_void_p)
    _proto(cdll, "bpf_map_update_elem", c_int, c_int, c_void_p, c_void_p, c_uint64)
    _proto(cdll, "bpf_map_delete_elem", c_int, c_int, c_void_p)
    _proto(cdll, "bpf_map_get_next_key", c_int, c_int, c_void_p, c_void_p)
    _proto(cdll, "bpf_prog_test_run_opts", c_int, c_int, c_void_p)
    _proto(cdll, "bpf_prog_load", c_int, c_int, c_char_p, c_char_p, c_void_p, c_size_t, c_void_p)
    # Exact coverage (pytest_lbr.bpf.counted): a program loaded again with counters.
    _proto(cdll, "bpf_map_create", c_int, c_int, c_char_p, c_uint32, c_uint32, c_uint32, c_void_p)
    _proto(cdll, "bpf_program__flags", c_uint32, c_void_p)
    _proto(cdll, "bpf_object__btf_fd", c_int, c_void_p)
    # Attaching the LBR tracer and reading its ring buffer (pytest_lbr.capture.hooks.hook_set).
    _proto(cdll, "bpf_object__find_program_by_name", c_void_p, c_void_p, c_char_p)
    _proto(cdll, "bpf_object__find_map_by_name", c_void_p, c_void_p, c_char_p)
    _proto(cdll, "bpf_program__set_autoload", c_int, c_void_p, ctypes.c_bool)
    _proto(cdll, "bpf_program__set_attach_target", c_int, c_void_p, c_int, c_char_p)
    _proto(cdll, "bpf_program__attach_trace", c_void_p, c_void_p)
    _proto(cdll, "bpf_program__attach_kprobe_opts", c_void_p, c_void_p, c_char_p, c_void_p)
    _proto(cdll, "bpf_program__attach_kprobe_multi_opts", c_void_p, c_void_p, c_char_p, c_void_p)
    ptr = c_void_p
    _proto(cdll, "bpf_program__attach_tracepoint_opts", ptr, ptr, c_char_p, c_char_p, ptr)
    _proto(cdll, "bpf_program__attach_uprobe_opts", ptr, ptr, c_int, c_char_p, c_size_t, ptr)
    _proto(cdll, "bpf_program__attach", c_void_p, c_void_p)
    _proto(cdll, "bpf_link__fd", c_int, c_void_p)
    # Iterator programs (pytest_lbr.bpf: Program.iterate).
    _proto(cdll, "bpf_program__section_name", c_char_p, c_void_p)
    _proto(cdll, "bpf_program__attach_iter", c_void_p, c_void_p, c_void_p)
    _proto(cdll, "bpf_iter_create", c_int, c_int)
    # Real attachment to network interfaces (pytest_lbr.bpf: attach_xdp, attach_tc).
    _proto(cdll, "bpf_link_create", c_int, c_int, c_int, c_int, c_void_p)
    _proto(cdll, "bpf_xdp_query", c_int, c_int, c_int, c_void_p)
    _proto(cdll, "bpf_tc_hook_create", c_int, c_void_p)
    _proto(cdll, "bpf_tc_hook_destroy", c_int, c_void_p)
    _proto(cdll, "bpf_tc_attach", c_int, c_void_p, c_void_p)
    _proto(cdll, "bpf_tc_detach", c_int, c_void_p, c_void_p)
    _proto(cdll, "bpf_link__destroy", c_int, c_void_p)
    # cgroup, sockmap, struct_ops and perf-event attachment (pytest_lbr.bpf).
    _proto(cdll, "bpf_program__attach_cgroup", c_void_p, c_void_p, c_int)
    _proto(cdll, "bpf_program__attach_netns", c_void_p, c_void_p, c_int)
    _proto(cdll, "bpf_program__attach_perf_event", c_void_p, c_void_p, c_int)
    _proto(cdll, "bpf_program__expected_attach_type", c_int, c_void_p)
    _proto(cdll, "bpf_map__attach_struct_ops", c_void_p, c_void_p)
    _proto(cdll, "bpf_prog_attach", c_int, c_int, c_int, c_int, c_uint32)
    _proto(cdll, "bpf_prog_detach2", c_int, c_int, c_int, c_int)
    _proto(cdll, "bpf_map__reuse_fd", c_int, c_void_p, c_int)
    _proto(cdll, "bpf_map__set_initial_value", c_int, c_void_p, c_void_p, c_size_t)
    _proto(cdll, "ring_buffer__new", c_void_p, c_int, c_void_p, c_void_p, c_void_p)
    _proto(cdll, "ring_buffer__poll", c_int, c_void_p, c_int)
    _proto(cdll, "ring_buffer__consume", c_int, c_void_p)
    _proto(cdll, "ring_buffer__free", None, c_void_p)


#: The libbpf handle: `lib.bpf_prog_get_fd_by_id(7)`. Loaded on first use.
lib: Any = _Lib()

#: The oldest libbpf these bindings are written for: 1.0 made the error
#: conventions `check_int`/`check_ptr` rely on the only ones, and the option
#: structs declared here have their 1.x layout.
MIN_LIBBPF = (1, 0)


def libbpf_version() -> tuple[int, int] | None:
    """(major, minor) of the loaded libbpf; None when it is older than 0.6 (no version API)."""
    major = getattr(lib, "libbpf_major_version", None)
    minor = getattr(lib, "libbpf_minor_version", None)
    if major is None or minor is None:
        return None
    return int(major()), int(minor())


def libbpf_version_problem(version: tuple[int, int] | None) -> str:
    """One actionable line when `version` (from `libbpf_version()`) is too old, else ""."""
    if version is not None and version >= MIN_LIBBPF:
        return ""
    have = "older than 0.6" if version is None else f"{version[0]}.{version[1]}"
    need = f"{MIN_LIBBPF[0]}.{MIN_LIBBPF[1]}"
    return (
        f"libbpf {have} is too old: pytest-lbr needs libbpf >= {need} "
        "(Debian 12: apt-get install libbpf1; elsewhere build libbpf from source)"
    )


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
        # func_info / line_info / jited_line_info: the kernel rejects a record
        # size other than its own (EINVAL), so say which one we expect.
        if hasattr(info, f"{field}_rec_size"):
            setattr(info, f"{field}_rec_size", ctypes.sizeof(ctype))
    check_int(
        lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)),
        "bpf_obj_get_info_by_fd",
    )
    return info, bufs


class bpf_iter_attach_opts(Structure):  # noqa: N801 -- libbpf name
    """`struct bpf_iter_attach_opts` from libbpf's libbpf.h."""

    _fields_ = [("sz", c_size_t), ("link_info", c_void_p), ("link_info_len", c_uint32)]


class bpf_test_run_opts(Structure):  # noqa: N801 -- libbpf name
    """`struct bpf_test_run_opts` from libbpf's bpf.h (libbpf 1.1 layout)."""

    _fields_ = [
        ("sz", c_size_t),
        ("data_in", c_void_p),
        ("data_out", c_void_p),
        ("data_size_in", c_uint32),
        ("data_size_out", c_uint32),
        ("ctx_in", c_void_p),
        ("ctx_out", c_void_p),
        ("ctx_size_in", c_uint32),
        ("ctx_size_out", c_uint32),
        ("retval", c_uint32),
        ("repeat", c_int),
        ("duration", c_uint32),
        ("flags", c_uint32),
        ("cpu", c_uint32),
        ("batch_size", c_uint32),
    ]


# libbpf_set_print() is process-wide: one lock serialises the sections that
# redirect it, and the callback object stays referenced while libbpf holds it.
# Reentrant: a section may open inside another (a doctor check that attaches).
_PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
_print_lock = threading.RLock()
_print_sink: list[str] | None = None
_LIBBPF_INFO = 1  # enum libbpf_print_level: WARN 0, INFO 1, DEBUG 2 (dropped)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    libc.vasprintf.restype = c_int
    libc.vasprintf.argtypes = [POINTER(c_char_p), c_char_p, c_void_p]
    libc.free.restype = None
    libc.free.argtypes = [c_void_p]
    return libc


def _on_print(level: int, fmt: bytes | None, args: int | None) -> int:
    # On x86-64 a va_list parameter is a pointer to the caller's va_list
    # state, so it can be handed on to vasprintf as is (which also sizes the
    # output: the verifier log arrives as one "%s" of up to 16 MiB).
    sink = _print_sink
    if sink is None or fmt is None or level > _LIBBPF_INFO:
        return 0
    out = ctypes.c_void_p()
    n = _LIBC.vasprintf(ctypes.cast(ctypes.byref(out), POINTER(c_char_p)), fmt, args)
    if n >= 0 and out.value:
        sink.append(ctypes.string_at(out.value, n).decode("utf-8", "replace"))
        _LIBC.free(out.value)
    return 0


_LIBC = _libc()
_LIBC_ERRNO = ctypes.CDLL(None, use_errno=True)  # sys_bpf: syscall(2) with its errno
_print_cb = _PRINT_FN(_on_print)


@contextmanager
def libbpf_messages() -> Iterator[list[str]]:
    """Collect libbpf's warnings and info messages (the verifier log among them) instead of
    printing them to stderr, for the duration of the block.

    The yielded list fills with one string per message; the previous print
    callback is restored on exit. Blocks nest: the innermost collects, and the
    outer one collects again once it ends.
    """
    global _print_sink
    with _print_lock:
        outer = _print_sink
        sink: list[str] = []
        _print_sink = sink
        old = lib.libbpf_set_print(ctypes.cast(_print_cb, c_void_p))
        try:
            yield sink
        finally:
            lib.libbpf_set_print(old)
            _print_sink = outer
