"""What the running machine says about itself, read in one place and passed down.

`machine()` gathers the facts the backends, `pytest-lbr doctor`, the selftest
and the VM runner decide on: the architecture (`pytest_lbr.kernel.arch`), the
kernel release, whether the PMU records LBR (and how deep), whether the kernel
has BTF. `libc()` is the process's one handle on the C library. A `Machine` can
be built by hand, so code that decides on these facts is tested for other
machines (an arm64 one, one without BTF) on any host.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_lbr.kernel.arch import Architecture, UnknownArchitecture, architecture

__all__ = ["BTF_PATH", "LBR_CAPS_PATH", "Machine", "libc", "machine"]

#: The kernel's own BTF (CONFIG_DEBUG_INFO_BTF): fentry/fexit need it.
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
#: The PMU's LBR depth, where it has LBR (the x86 PMU driver's "branches" cap).
LBR_CAPS_PATH = Path("/sys/bus/event_source/devices/cpu/caps/branches")


@dataclass(frozen=True)
class Machine:
    """The running machine's facts (`machine()`), or another machine's, built by hand."""

    #: What `uname -m` prints ("x86_64"): `Trace.arch`.
    name: str
    #: Its `ARCHITECTURES` row (None for an architecture the table lacks).
    arch: Architecture | None
    #: `uname -r`.
    release: str
    #: The PMU's LBR depth (`LBR_CAPS_PATH`), None where it reports none.
    lbr_caps: int | None
    #: Size of the kernel's BTF in bytes, None without BTF (`BTF_PATH`).
    btf_size: int | None

    @property
    def btf(self) -> bool:
        """Whether the kernel has BTF."""
        return self.btf_size is not None

    @classmethod
    def of(cls, name: str, **facts: object) -> Machine:
        """A machine of architecture `name` (any spelling), the other facts given or unknown."""
        arch = architecture(name)
        fields: dict[str, object] = {"release": "", "lbr_caps": None, "btf_size": None}
        fields.update(facts)
        return cls(arch.name, arch, **fields)  # type: ignore[arg-type]


@functools.cache
def machine() -> Machine:
    """The running machine's facts, read once per process."""
    uname = os.uname()
    try:
        arch: Architecture | None = architecture(uname.machine)
    except UnknownArchitecture:
        arch = None
    try:
        caps: int | None = int(LBR_CAPS_PATH.read_text().strip())
    except (OSError, ValueError):
        caps = None
    try:
        btf: int | None = BTF_PATH.stat().st_size
    except OSError:
        btf = None
    return Machine(uname.machine, arch, uname.release, caps, btf)


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once, with errno kept for `ctypes.get_errno()`."""
    return ctypes.CDLL(None, use_errno=True)
