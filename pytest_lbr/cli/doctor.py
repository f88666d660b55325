"""`pytest-lbr doctor`: what this machine can trace, and for each thing it cannot, the fix."""

from __future__ import annotations

import argparse
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pytest_lbr.exit_codes import EXIT_FAILED, EXIT_OK

__all__ = ["DoctorCheck", "doctor_checks", "mount_check", "run_doctor"]


class DoctorCheck:
    """One line of `pytest-lbr doctor`: what was checked, the answer, and the fix."""

    def __init__(self, name: str, ok: bool, detail: str, fix: str = "") -> None:
        self.name, self.ok, self.detail, self.fix = name, ok, detail, fix

    def __str__(self) -> str:
        line = f"[{'ok' if self.ok else 'no'}] {self.name}: {self.detail}"
        return line if self.ok or not self.fix else f"{line}\n     fix: {self.fix}"


def _check(name: str, fn: Callable[[], DoctorCheck]) -> DoctorCheck:
    from pytest_lbr.bpf.libbpf import libbpf_messages

    try:
        with libbpf_messages():  # the check's answer says it; libbpf's chatter would not
            return fn()
    except Exception as exc:  # a check must answer, not crash the report
        return DoctorCheck(name, False, f"check failed: {type(exc).__name__}: {exc}")


def _root() -> DoctorCheck:
    if os.geteuid() == 0:
        return DoctorCheck("root", True, "running as root")
    return DoctorCheck(
        "root",
        False,
        f"running as uid {os.geteuid()}: BPF tracing and ftrace need root",
        "run as root (sudo pytest-lbr ...), or in a guest: pytest-lbr vm --kernel 6.12",
    )


def _btf() -> DoctorCheck:
    from pytest_lbr.kernel.machine import BTF_PATH, machine

    size = machine().btf_size
    if size is not None:
        return DoctorCheck("BTF", True, f"{BTF_PATH} ({size} bytes)")
    return DoctorCheck(
        "BTF", False, f"no {BTF_PATH}", "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )


def _fentry() -> DoctorCheck:
    from pytest_lbr.capture.hooks.hook_set import try_load_fexit

    try:
        try_load_fexit("vfs_write")
    except Exception as exc:
        code = getattr(exc, "errno", None)
        why = "EPERM: refused (kernel lockdown?)" if code == errno.EPERM else str(exc)
        return DoctorCheck(
            "fentry",
            False,
            f"fexit program on vfs_write does not load: {why}",
            "trace in a guest with a stock kernel: pytest-lbr vm --kernel 6.12 (docs/ci.md)",
        )
    return DoctorCheck("fentry", True, "fexit program on vfs_write loads")


def _kprobe_multi() -> DoctorCheck:
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.targets import parse_target

    try:
        with HookSet([parse_target("kfunc:vfs_writ*")], snapshot=False, fallback="kprobe") as hs:
            notes = list(hs.notes)
    except OSError as exc:
        return DoctorCheck(
            "kprobe.multi",
            False,
            f"neither kprobe.multi nor single kprobes attach to vfs_write: {exc.strerror}",
            "needs CONFIG_KPROBES=y (and CONFIG_FPROBE=y for kprobe.multi): run in a guest "
            "(pytest-lbr vm --kernel 6.12)",
        )
    if notes:
        return DoctorCheck(
            "kprobe.multi",
            False,
            notes[0],
            "globs still work, attached one kprobe per function (slower); kprobe.multi "
            "needs Linux >= 5.18 with CONFIG_FPROBE=y",
        )
    return DoctorCheck(
        "kprobe.multi", True, "kfunc:vfs_writ* attached through one kprobe.multi link"
    )


def _pmu() -> DoctorCheck:
    from pytest_lbr.kernel import perf

    attr = perf.perf_event_attr()
    attr.size = perf.ctypes.sizeof(attr)
    attr.type = perf.PERF_TYPE_HARDWARE
    attr.config = perf.PERF_COUNT_HW_CPU_CYCLES
    try:
        fd = perf.perf_event_open(attr, -1, perf.online_cpus()[0])
    except OSError as exc:
        fix = (
            "no hardware PMU here (a VM without vPMU?): on an Intel KVM host boot the guest "
            "with -cpu host,pmu=on (pytest-lbr vm does, docs/ci.md)"
        )
        return DoctorCheck(
            "PMU", False, f"perf_event_open(cycles) failed: {os.strerror(exc.errno or 0)}", fix
        )
    os.close(fd)
    return DoctorCheck("PMU", True, "hardware cycles counter opens")


def _backend(name: str) -> Callable[[], DoctorCheck]:
    """Backend `name`'s line: what its own probe says it checked, found and would fix."""

    def check() -> DoctorCheck:
        from pytest_lbr.capture import probe

        cap = probe(name)
        found = cap.detail if cap.available else "; ".join(filter(None, (cap.detail, cap.reason)))
        return DoctorCheck(cap.check, cap.available, found, cap.fix)

    return check


def mount_check() -> DoctorCheck:
    """`doctor --mount`: mount tracefs where it is not (the one command that mounts)."""
    from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS, TracefsError, find_tracefs, mount_tracefs

    if find_tracefs() == Path(TRACEFS_MOUNTS[0]):
        return DoctorCheck("mount tracefs", True, f"already mounted at {TRACEFS_MOUNTS[0]}")
    try:
        return DoctorCheck("mount tracefs", True, f"mounted at {mount_tracefs()}")
    except TracefsError as exc:
        return DoctorCheck(
            "mount tracefs",
            False,
            exc.strerror or str(exc),
            "mount needs root: sudo pytest-lbr doctor --mount, or run in a guest "
            "(pytest-lbr vm --kernel 6.12 mounts it)",
        )


def _vmlinux(explicit: str | None) -> Callable[[], DoctorCheck]:
    def check() -> DoctorCheck:
        from pytest_lbr.symbols.vmlinux import find_vmlinux, running_build_id

        path, status = find_vmlinux(explicit)
        running = running_build_id() or "unreadable"
        if path is not None:
            return DoctorCheck("debug vmlinux", True, status)
        release = os.uname().release
        if running not in status:
            status = f"{status} (running build-id {running})"
        return DoctorCheck(
            "debug vmlinux",
            False,
            status,
            f"install the kernel's debug image (Debian: apt install linux-image-{release}-dbg, "
            "or pytest-lbr fetch-vmlinux into the cache) or pass --lbr-vmlinux=PATH; traces "
            "then get file:line",
        )

    return check


def doctor_checks(vmlinux: str | None = None) -> list[DoctorCheck]:
    """Every check `pytest-lbr doctor` prints, in order."""
    from pytest_lbr.capture import REGISTRY

    checks: list[tuple[str, Callable[[], DoctorCheck]]] = [
        ("root", _root),
        ("BTF", _btf),
        ("fentry", _fentry),
        ("kprobe.multi", _kprobe_multi),
        ("PMU", _pmu),
        *((name, _backend(name)) for name in REGISTRY),  # each backend's own line
        ("debug vmlinux", _vmlinux(vmlinux)),
    ]
    return [_check(name, fn) for name, fn in checks]


def run_doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`pytest-lbr doctor [--mount] [--helpers]`: 0 when tracing works here."""
    from pytest_lbr.tracer import Tracer

    print(f"pytest-lbr doctor: kernel {os.uname().release} {os.uname().machine}", file=out)
    if args.helpers:
        return _doctor_helpers(args, out, err)
    if args.mount:  # first: the checks below then see tracefs mounted
        print(_check("mount tracefs", mount_check), file=out, flush=True)
    for check in doctor_checks(args.vmlinux):
        print(check, file=out, flush=True)
    from pytest_lbr.bpf.libbpf import libbpf_messages

    tracer = Tracer("auto")
    with libbpf_messages():
        available = tracer.available
    if available:
        print(f"=> tracing works here: backend {tracer.backend}", file=out)
        return EXIT_OK
    print(f"=> no tracing here: {tracer.reason}", file=out)
    return EXIT_FAILED


def _doctor_helpers(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`doctor --helpers`: each helper, its implementation, and how each backend sees it."""
    from pytest_lbr.capture.helper_table import format_rows, read_rows

    if args.mount:
        print(_check("mount tracefs", mount_check), file=out, flush=True)
    rows, why = read_rows()
    if not rows:
        print(f"pytest-lbr doctor --helpers: {why}", file=err)
        return EXIT_FAILED
    print(format_rows(rows, markdown=args.markdown), file=out)
    if why:
        print(f"note: implementations incomplete: {why}", file=err)
    return EXIT_OK
