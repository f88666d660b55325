"""perf events with branch stacks: what makes the CPU record LBR while we trace.

LBR only records while a perf event with PERF_SAMPLE_BRANCH_STACK is open on a
CPU (retsnoop and bpfsnoop do the same), so `open_branch_events` opens one such
event per online CPU for the duration of a trace and `BranchEvents.close()`
closes them.
"""

from __future__ import annotations

import ctypes
import errno
import os
from ctypes import Structure, c_int32, c_uint16, c_uint32, c_uint64
from types import TracebackType

from pytest_lbr.kernel.arch import ARCHITECTURES
from pytest_lbr.kernel.machine import libc, machine

__all__ = [
    "BRANCH_FILTERS",
    "PERF_FLAG_FD_CLOEXEC",
    "PERF_SAMPLE_BRANCH_KERNEL",
    "PERF_SAMPLE_BRANCH_STACK",
    "PERF_SAMPLE_BRANCH_TYPE_SAVE",
    "PERF_TYPE_HARDWARE",
    "PERF_TYPE_SOFTWARE",
    "BranchEvents",
    "branch_attr",
    "online_cpus",
    "open_branch_events",
    "perf_event_attr",
    "perf_event_open",
    "software_branch_events",
]

# uapi linux/perf_event.h
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_SAMPLE_BRANCH_STACK = 1 << 11
PERF_SAMPLE_BRANCH_USER = 1 << 0
PERF_SAMPLE_BRANCH_KERNEL = 1 << 1
#: Ask the kernel to fill perf_branch_entry.type (Linux commit eb0baf8a0d92, v4.14).
PERF_SAMPLE_BRANCH_TYPE_SAVE = 1 << 16
PERF_FLAG_FD_CLOEXEC = 1 << 3
#: perf_event_open's number per `uname -m`: a view of `ARCHITECTURES`.
PERF_EVENT_OPEN_NR = {a.name: a.perf_event_open_nr for a in ARCHITECTURES}

#: --lbr-filter value -> branch_sample_type bits (besides KERNEL and TYPE_SAVE).
BRANCH_FILTERS = {
    "any": 1 << 3,
    "any_call": 1 << 4,
    "any_return": 1 << 5,
    "ind_call": 1 << 6,
    "cond": 1 << 10,
    "call_stack": 1 << 11,
    "ind_jump": 1 << 12,
    "call": 1 << 13,
}


class perf_event_attr(Structure):  # noqa: N801 -- uapi name
    """`struct perf_event_attr` (PERF_ATTR_SIZE_VER8, 136 bytes; the flag bits are one u64)."""

    _fields_ = [
        ("type", c_uint32),
        ("size", c_uint32),
        ("config", c_uint64),
        ("sample_period", c_uint64),  # union with sample_freq
        ("sample_type", c_uint64),
        ("read_format", c_uint64),
        ("flags", c_uint64),  # disabled:1, inherit:1, pinned:1, ... (bit 0 = disabled)
        ("wakeup_events", c_uint32),
        ("bp_type", c_uint32),
        ("config1", c_uint64),
        ("config2", c_uint64),
        ("branch_sample_type", c_uint64),
        ("sample_regs_user", c_uint64),
        ("sample_stack_user", c_uint32),
        ("clockid", c_int32),
        ("sample_regs_intr", c_uint64),
        ("aux_watermark", c_uint32),
        ("sample_max_stack", c_uint16),
        ("_reserved_2", c_uint16),
        ("aux_sample_size", c_uint32),
        ("_reserved_3", c_uint32),
        ("sig_data", c_uint64),
        ("config3", c_uint64),
    ]


_syscall = libc().syscall
_syscall.restype = ctypes.c_long


def perf_event_open(attr: perf_event_attr, pid: int, cpu: int, group_fd: int = -1) -> int:
    """perf_event_open(2) with FD_CLOEXEC; raises OSError with the errno (ENOSYS
    on a machine whose syscall number `PERF_EVENT_OPEN_NR` does not know)."""
    here = machine()
    if here.arch is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: no syscall number for {here.name}")
    number = here.arch.perf_event_open_nr
    fd = _syscall(
        ctypes.c_long(number),
        ctypes.byref(attr),
        ctypes.c_int(pid),
        ctypes.c_int(cpu),
        ctypes.c_int(group_fd),
        ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open: {os.strerror(err)}")
    return int(fd)


def branch_attr(filter: str = "any") -> perf_event_attr:
    """The attr retsnoop uses: CPU cycles with a kernel branch stack, entry types saved."""
    if filter not in BRANCH_FILTERS:
        raise ValueError(
            f"unknown LBR filter {filter!r}; expected one of {','.join(BRANCH_FILTERS)}"
        )
    attr = perf_event_attr()
    attr.size = ctypes.sizeof(attr)
    attr.type = PERF_TYPE_HARDWARE
    attr.config = PERF_COUNT_HW_CPU_CYCLES
    attr.sample_type = PERF_SAMPLE_BRANCH_STACK
    attr.branch_sample_type = (
        PERF_SAMPLE_BRANCH_KERNEL | BRANCH_FILTERS[filter] | PERF_SAMPLE_BRANCH_TYPE_SAVE
    )
    return attr


def online_cpus() -> list[int]:
    """CPU numbers from /sys/devices/system/cpu/online ("0-3,6")."""
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


class BranchEvents:
    """One branch-stack perf event per online CPU; closed by `close()` / `with`."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = fds

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())

    def __enter__(self) -> BranchEvents:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def software_branch_events(filter: str = "any", cpus: list[int] | None = None) -> BranchEvents:
    """The LBR events' attributes on a software clock: real per-CPU perf fds where
    there is no PMU (a TCG guest), so the LBR capture's attach, arm and release
    paths run for real. They record no branches; tests and benchmarks use them."""
    return open_branch_events(filter, cpus, software=True)


def open_branch_events(
    filter: str = "any", cpus: list[int] | None = None, *, software: bool = False
) -> BranchEvents:
    """Open the LBR-enabling events; OSError ENOENT = no PMU, EOPNOTSUPP = PMU without LBR.

    A failure on one CPU closes those already open.
    """
    attr = branch_attr(filter)
    if software:
        attr.type, attr.config, attr.sample_type = PERF_TYPE_SOFTWARE, 0, 0
    fds: list[int] = []
    try:
        for cpu in online_cpus() if cpus is None else cpus:
            fds.append(perf_event_open(attr, -1, cpu))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if not fds:
        raise OSError(errno.ENODEV, "no online CPU")
    return BranchEvents(fds)
