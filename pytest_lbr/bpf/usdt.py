"""Attaching a `SEC("usdt")` program of the `bpf` harness to a USDT probe (a
User Statically-Defined Tracing point: `DTRACE_PROBE2(provider, name, ...)` from
<sys/sdt.h>) through libbpf's `bpf_program__attach_usdt` (libbpf >= 0.8).

libbpf reads the probe's `.note.stapsdt` notes from the binary, fills the
argument specs its usdt.bpf.h reads (`BPF_USDT(...)`), and attaches a uprobe at
every site of the probe (and bumps its semaphore, where it has one). A bare
`SEC("usdt")` has nothing libbpf can auto-attach, so `Program.attach()` refuses it:
`prog.attach_usdt(binary, provider, name)` (`Program.attach_usdt` calls this module).
"""

from __future__ import annotations

import ctypes
import errno
import os
from ctypes import Structure, c_char_p, c_int, c_size_t, c_uint64, c_void_p
from typing import Any, Protocol, TypeVar

from pytest_lbr.bpf.libbpf import lib, libbpf_messages
from pytest_lbr.bpf.links import AttachError, Link

__all__ = ["UsdtOpts", "attach_usdt"]

_PERMISSION = (errno.EPERM, errno.EACCES)
_L = TypeVar("_L", bound=Link)


class _Program(Protocol):
    """What of `pytest_lbr.bpf.Program` this needs (bpf.py imports this module, not
    the other way round)."""

    name: str
    _ptr: int

    @property
    def type(self) -> str: ...

    @property
    def section(self) -> str: ...

    def _require(self, kind: str, section: str, mode: str) -> None: ...

    def _keep(self, link: _L) -> _L: ...


class UsdtOpts(Structure):
    """struct bpf_usdt_opts (libbpf.h, 1.1 layout): the cookie `bpf_usdt_cookie()` reads."""

    _fields_ = [("sz", c_size_t), ("usdt_cookie", c_uint64)]


def _attach_fn() -> Any:
    """libbpf's bpf_program__attach_usdt with its prototype (declared once here:
    pytest_lbr.bpf.libbpf declares the others); AttachError where libbpf has none (< 0.8)."""
    fn = getattr(lib, "bpf_program__attach_usdt", None)
    if fn is None:
        raise AttachError(
            errno.ENOSYS,
            "cannot attach a USDT probe",
            "this libbpf has no bpf_program__attach_usdt (it came with libbpf 0.8)",
        )
    if fn.restype is not c_void_p:
        fn.restype = c_void_p
        fn.argtypes = [c_void_p, c_int, c_char_p, c_char_p, c_char_p, c_void_p]
    return fn


def attach_usdt(
    prog: _Program,
    binary: str | os.PathLike[str],
    provider: str,
    name: str,
    pid: int | None = None,
    *,
    cookie: int = 0,
) -> Link:
    """Attach `prog` (from `SEC("usdt")`) to the USDT probe `provider:name` of
    `binary` (an executable or shared library; a bare name is looked up as libbpf
    does, in PATH or the library paths). `pid`: only that process's hits (None:
    every process that runs the binary). `cookie`: what `bpf_usdt_cookie(ctx)`
    returns in the program. The link is destroyed by `Link.close()` or when the
    object closes. AttachError (one line, with libbpf's last message) when it is no
    USDT program, the binary has no such probe, or the kernel refuses the uprobe.
    """
    what = f"cannot attach {prog.name} to USDT {provider}:{name} of {os.fspath(binary)}"
    prog._require("kprobe", "usdt", f"USDT {provider}:{name}")
    if not prog.section.startswith("usdt"):
        raise AttachError(
            errno.EINVAL,
            what,
            f'it is a {prog.type} program from SEC("{prog.section}"), not SEC("usdt")',
        )
    fn = _attach_fn()
    opts = UsdtOpts(sz=ctypes.sizeof(UsdtOpts), usdt_cookie=cookie)
    with libbpf_messages() as log:
        ptr = fn(
            prog._ptr,
            -1 if pid is None else pid,
            os.fsencode(binary),
            provider.encode(),
            name.encode(),
            ctypes.byref(opts),
        )
        err = ctypes.get_errno() or errno.EINVAL
    if not ptr:
        hint = " ".join(log[-1].split()) if log else ""
        if err in _PERMISSION and not hint:
            hint = "attaching needs root (CAP_BPF with CAP_PERFMON, or CAP_SYS_ADMIN)"
        raise AttachError(err, what, hint)
    return prog._keep(Link(prog.name, ptr))
