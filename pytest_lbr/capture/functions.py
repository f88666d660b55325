"""Which kernel functions a target names: the kernel BTF and ftrace's list of traceable functions.

A glob expands against `available_filter_functions` (what kprobes and ftrace can
hook) where tracefs is readable, else against the BTF's function names; the
tracer's own functions (pytest_lbr.noise) are never included.
"""

from __future__ import annotations

import ctypes
import fnmatch
from collections import Counter
from collections.abc import Iterable
from ctypes import POINTER, c_uint32

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.ftrace import TRACEFS_MOUNTS, filter_functions_text, matching_functions
from pytest_lbr.libbpf import lib
from pytest_lbr.noise import TRACER_OWN_FUNCTIONS
from pytest_lbr.targets import Target

__all__ = ["btf_functions", "check_in_btf", "expand_glob"]

_BTF_KIND_FUNC = 12


def check_in_btf(target: Target) -> None:
    """Raise CaptureError unless `target.function` is a function of the kernel BTF (fexit needs it)."""
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        raise CaptureError(
            f"{target.spec}: no kernel BTF (/sys/kernel/btf/vmlinux): fexit impossible"
        )
    try:
        if lib.btf__find_by_name_kind(btf, (target.function or "").encode(), _BTF_KIND_FUNC) < 0:
            raise CaptureError(
                f"{target.spec}: {target.function} is not a function in the kernel BTF "
                "(misspelt, inlined, static duplicate or a module function)"
            )
    finally:
        lib.btf__free(btf)


def _filter_functions_text() -> str | None:
    for root in TRACEFS_MOUNTS:
        try:
            return filter_functions_text(root)
        except OSError:
            continue
    return None


def btf_functions() -> list[str]:
    """Every function name in the kernel BTF (empty without BTF)."""
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return []
    try:
        out = []
        for type_id in range(1, lib.btf__type_cnt(btf)):
            t = ctypes.cast(lib.btf__type_by_id(btf, type_id), POINTER(c_uint32))
            if (t[1] >> 24) & 0x1F == _BTF_KIND_FUNC:
                out.append(lib.btf__str_by_offset(btf, t[0]).decode())
        return out
    finally:
        lib.btf__free(btf)


def expand_glob(pattern: str, functions: Iterable[str] | None = None) -> list[str]:
    """Traceable kernel functions matching `pattern`, minus the tracer's own, sorted, unique.

    Functions listed twice (static functions of the same name) are dropped: a
    name cannot say which one to attach.
    """
    if functions is None and (text := _filter_functions_text()) is not None:
        seen = Counter(matching_functions(text, pattern, modules=False))
    else:
        names = btf_functions() if functions is None else functions
        seen = Counter(n for n in names if fnmatch.fnmatchcase(n, pattern))
    own = TRACER_OWN_FUNCTIONS
    return sorted(
        n
        for n, count in seen.items()
        if count == 1 and not any(fnmatch.fnmatchcase(n, o) for o in own)
    )
