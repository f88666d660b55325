"""Every architecture pytest-lbr knows, in one table (drgn's `ARCHITECTURES` is the model).

Each fact about an architecture that code depends on is a field of its row:
the name `uname -m` prints (what `Trace.arch` and golden headers carry), its
Debian name (kernel packages, `pytest-lbr vm --arch`), the name BPF's
`bpf_tracing.h` gives it (`__TARGET_ARCH_<name>`, the tracer object), the
perf_event_open syscall number, where a uprobe finds the return address, and
what the VM runner boots it with.
Lookups accept any of the names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "Architecture", "UnknownArchitecture", "architecture"]


class UnknownArchitecture(ValueError):
    """A name no row of `ARCHITECTURES` has; the message lists the known ones."""


@dataclass(frozen=True)
class Architecture:
    """One architecture's facts."""

    #: What `uname -m` prints: "x86_64", "aarch64".
    name: str
    #: Debian's name (linux-image-*-<debian>, dpkg --print-architecture): "amd64".
    debian: str
    #: bpf_tracing.h's name (`-D__TARGET_ARCH_<bpf>`), the tracer object's: "x86".
    bpf: str
    #: perf_event_open's syscall number (arch/x86/entry/syscalls/syscall_64.tbl;
    #: arm64 and riscv64 take the generic table, include/uapi/asm-generic/unistd.h).
    perf_event_open_nr: int
    #: A uprobe fetch argument for the return address at a function's first
    #: instruction: on the stack where `call` pushes it (x86-64), in the link
    #: register where `bl`/`jal` put it (arm64 x30; riscv64 ra, a name
    #: arch/riscv/kernel/ptrace.c's regoffset_table gives fetch arguments).
    uprobe_return_address: str
    #: QEMU's system emulator for it, and the Debian package holding it (for the VM runner).
    qemu_system: str
    qemu_package: str
    #: The boot image a kernel build leaves in arch/<bpf>/boot/.
    kernel_image: str

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling of this architecture a lookup accepts."""
        return (self.name, self.debian, self.bpf)


#: Every architecture, the one CI runs first.
ARCHITECTURES = (
    Architecture(
        "x86_64", "amd64", "x86", 298, "+0(%sp)", "qemu-system-x86_64", "qemu-system-x86", "bzImage"
    ),
    Architecture(
        "aarch64", "arm64", "arm64", 241, "%x30", "qemu-system-aarch64", "qemu-system-arm", "Image"
    ),
    Architecture(
        "riscv64",
        "riscv64",
        "riscv",
        241,
        "%ra",
        "qemu-system-riscv64",
        "qemu-system-misc",
        "Image",
    ),
)


def architecture(name: str | None = None) -> Architecture:
    """The row for `name` (any of its `names`, any case), or for the running machine.

    UnknownArchitecture for a name no row has.
    """
    wanted = (name or os.uname().machine).lower()
    for arch in ARCHITECTURES:
        if wanted in arch.names:
            return arch
    known = ", ".join(a.name for a in ARCHITECTURES)
    raise UnknownArchitecture(f"unknown architecture {wanted!r}; known: {known}")
