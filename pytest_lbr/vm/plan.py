"""The plan of one guest: the `vng` command line that boots a kernel and runs pytest in it.

`build_command` decides everything before boot (KVM or TCG, vCPUs, LBR passthrough,
the writable directories, the guest side's arguments) into a `VmPlan`, which
`--dry-run` prints; `claim_results_dir` gives each run a results directory of its own.
"""

from __future__ import annotations

import fcntl
import os
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_lbr.symbols.cache import cache_dir
from pytest_lbr.vm.host import boot_image, find_tools, kvm_usable, lbr_passthrough_opts
from pytest_lbr.vm.messages import VmError, say
from pytest_lbr.vm.root import GuestRoot

__all__ = ["VmPlan", "build_command", "claim_results_dir"]

#: Where a guest with a root of its own mounts a writable directory that lies inside
#: the working directory, before `guest --bind` puts it in place.
_ASIDE = Path("/var/lib/pytest-lbr")


def claim_results_dir(wanted: Path) -> Path:
    """Lock a results directory for this run; if another run holds it, use `<dir>.2`, ...

    Two runs writing one directory would delete each other's status files.
    The lock (flock on `.lock`) is held until this process exits.
    """
    wanted = wanted.resolve()
    for n in range(1, 100):
        path = wanted if n == 1 else wanted.with_name(f"{wanted.name}.{n}")
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held_locks.append(fd)
        if n > 1:
            say(f"{wanted} is in use by another run; using {path}")
        return path
    raise VmError(f"no free results directory next to {wanted}")


_held_locks: list[int] = []


@dataclass
class VmPlan:
    """Everything decided before boot; `command` is what --dry-run prints."""

    label: str
    kernel: Path
    results: Path
    command: list[str]
    accel: str
    lbr: str
    host_cpus: int = 1  # host cores the guest keeps busy (TCG: one thread for all vCPUs)
    #: Directories made before boot: mount points in a guest root of its own.
    mount_points: tuple[Path, ...] = ()
    #: Variables the guest's pytest (or command) gets from the host (`guest_environment`).
    env: dict[str, str] = field(default_factory=dict)


def build_command(
    kernel: Path,
    results: Path,
    args: Sequence[str],
    *,
    label: str = "",
    execute: str | None = None,
    memory: str = "2G",
    cpus: int | None = None,
    kvm: bool | None = None,
    append: str = "",
    rw: Sequence[Path] = (),
    kernel_log: bool = False,
    strict: bool = True,
    cwd: Path | None = None,
    vng: Path | None = None,
    root: GuestRoot | None = None,
    env: Mapping[str, str] | None = None,
) -> VmPlan:
    """The vng command line that runs pytest `args` (or the command `execute`) in the guest.

    `root`: boot that root file system (and its architecture) instead of sharing the host's.
    `env`: variables for the guest's pytest (`guest_environment`).
    """
    vng = vng or find_tools(root)
    cwd = cwd or Path.cwd()
    # Another architecture's guest (an arm64 root on an x86-64 host): always emulated.
    foreign = root.machine if root is not None and root.machine != platform.machine() else ""
    if foreign:
        if kvm:
            raise VmError(f"--kvm: KVM runs only {platform.machine()} guests here, not {foreign}")
        kvm, accel_why = False, f"{foreign} on {platform.machine()}: emulated"
    elif kvm is None:
        kvm, accel_why = kvm_usable(boot_image(kernel))
    else:
        accel_why = "forced by option"
    if cpus is None:
        cpus = 2  # so the per-CPU paths (a perf event per CPU, hits on CPU 1) run
    qemu_opts: list[str] = []
    lbr_why = "TCG guest: no PMU, so no LBR"
    if foreign and foreign != "x86_64":
        lbr_why = f"{foreign} guest: Linux has bpf_get_branch_snapshot() only on x86"
    host_cpus = cpus
    if kvm:
        qemu_opts, lbr_why = lbr_passthrough_opts()
    else:
        # Single-threaded TCG: the vCPUs take turns on one host thread. Two MTTCG vCPUs
        # (a thread each) oopsed the 6.12 guest ("Oops: int3" in __schedule) while ftrace
        # patched call sites. Round-robin ran test_graph, test_faults and test_lifecycle
        # clean in 6.1 and 6.12, test_graph in 0.9-1.3x its one-vCPU time (busy host).
        qemu_opts, host_cpus = ["-accel", "tcg,thread=single"], 1
    python = root.python() if root else sys.executable
    guest = [python, "-m", "pytest_lbr.vm", "guest", "--results", str(results)]
    # A root of its own: each host directory is mounted at its host path (vng's
    # GUEST=HOST form) over a mount point that must exist in that root, and the
    # working directory read-only. vng mounts writable directories before read-only
    # ones, so one inside the working directory is mounted aside and bound into
    # place by the guest side.
    exports: list[tuple[Path, Path]] = []  # (guest path, host path), writable
    mount_points: tuple[Path, ...] = ()
    if root is not None:
        for i, path in enumerate((results, *rw)):
            aside = path.is_relative_to(cwd)
            at = _ASIDE / f"rw{i}" if aside else path
            exports.append((at, path))
            if aside:
                guest += ["--bind", f"{at}:{path}"]
        mount_points = tuple(
            root.path / p.relative_to("/") for p in (cwd, *(a for a, _ in exports))
        )
    # The host's symbol cache, shared with guests of the host's root (a root of its
    # own keeps its own: its kernels are not the host's).
    cache: Path | None = cache_dir() if root is None and cache_dir().is_dir() else None
    if cache is not None:
        guest += ["--cache", str(cache)]
    if not strict:
        guest.append("--no-strict")
    if execute is not None:
        guest += ["--exec", execute]
    guest += ["--", *args]
    cmd = [str(vng), "--run", str(kernel), "--memory", memory, "--cpus", str(cpus)]
    if root is not None:
        cmd += ["--arch", root.debian_arch, "--root", str(root.path), "--rodir", f"{cwd}={cwd}"]
        for at, path in exports:
            cmd += ["--rwdir", f"{at}={path}"]
    else:
        for path in (results, *rw):
            cmd += ["--rwdir", str(path)]
    if cache is not None:
        # Writable in the guest, in its RAM: the sessions of one boot share the symbol
        # line cache (a cold debug-vmlinux lookup parses DWARF again in each session).
        cmd += ["--overlay-rwdir", str(cache)]
    if os.geteuid() != 0:
        cmd += ["--user", "root"]  # tracing needs root in the guest
    if not kvm:
        cmd.append("--disable-kvm")
    if qemu_opts:
        cmd.append(f"--qemu-opts={' '.join(qemu_opts)}")  # one word: its value starts with -
    if append:
        cmd += ["--append", append]
    if kernel_log:  # the kernel's console (boot, oops, panic) into the console log
        cmd.append("--verbose")
    cmd += ["--exec", f"cd {shlex.quote(str(cwd))} && {shlex.join(guest)}"]
    accel = f"{'KVM' if kvm else 'TCG'} ({accel_why})"
    return VmPlan(
        label or kernel.name,
        kernel,
        results,
        cmd,
        accel,
        lbr_why,
        host_cpus,
        mount_points,
        dict(env or {}),
    )
