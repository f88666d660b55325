"""The kernel VM runner: boot a kernel with virtme-ng and run pytest inside it as root.

Host side (`ci/qemu/run` calls `python -m pytest_lbr.vm run ...`):
    picks the kernel image, KVM or TCG, LBR passthrough where the host has it,
    runs `vng`, watches for boot and for the end, and returns pytest's exit status.
Guest side (`python -m pytest_lbr.vm guest ...`, started by vng --exec):
    mounts bpffs/tracefs/debugfs, runs pytest with JUnit XML, saves dmesg and
    writes pytest's exit status to the results directory: that file is the
    status channel, so a guest that never got there (no boot, panic, hang) is
    told apart from a failing test.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GuestSummary",
    "VmError",
    "build_command",
    "kvm_usable",
    "lbr_passthrough_opts",
    "main",
    "resolve_kernel",
    "run_vm",
    "summarize_junit",
]

REPO = Path(__file__).resolve().parent.parent
STARTED = "started"
STATUS = "status"
#: Exit status when the guest never reported one (boot failure, panic, hang).
EXIT_NO_GUEST = 3


class VmError(RuntimeError):
    """The VM could not be set up or did not report back; the message says why."""


# -- host side -------------------------------------------------------------------


def resolve_kernel(spec: str) -> Path:
    """'6.1' / '6.12' -> the newest installed /boot/vmlinuz of that series; else a path."""
    if re.fullmatch(r"\d+\.\d+", spec):
        found = sorted(
            glob.glob(f"/boot/vmlinuz-{spec}.*"),
            key=lambda p: [int(x) if x.isdigit() else 0 for x in re.split(r"[.-]", p)],
        )
        if not found:
            raise VmError(f"no /boot/vmlinuz-{spec}.* installed (run ci/setup)")
        return Path(found[-1])
    path = Path(spec)
    if not path.is_file():
        raise VmError(f"kernel image {spec!r} does not exist")
    return path


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "pytest-lbr"


def kvm_usable(kernel: Path, timeout: float = 20.0) -> tuple[bool, str]:
    """Can KVM boot a stock kernel here? Probed once (QEMU + kernel, cached).

    /dev/kvm may exist and still refuse stock kernels (PVM-only hosts: QEMU dies
    setting an MSR); only an actual early boot proves it. Never hangs: the probe
    is killed after `timeout` seconds.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm missing or not accessible"
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        return False, "qemu-system-x86_64 not installed"
    key = hashlib.sha1(f"{os.uname().release}|{qemu}|{kernel}".encode()).hexdigest()[:12]
    cache = _cache_dir() / f"kvm-probe-{key}.json"
    try:
        saved = json.loads(cache.read_text())
        return bool(saved["usable"]), str(saved["why"])
    except (OSError, ValueError, KeyError):
        pass
    cmd = [
        qemu,
        "-enable-kvm",
        "-cpu",
        "host",
        "-m",
        "256",
        "-nographic",
        "-no-reboot",
        "-kernel",
        str(kernel),
        "-append",
        "console=ttyS0 panic=-1",
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=timeout, text=True, errors="replace")
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
    usable = "Linux version" in text
    why = (
        "KVM boots a stock kernel"
        if usable
        else (
            "KVM cannot boot a stock kernel here: "
            + (text.strip().splitlines() or ["no output"])[0]
        )
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"usable": usable, "why": why}))
    return usable, why


def lbr_passthrough_opts() -> tuple[list[str], str]:
    """QEMU options giving the guest LBR, on an Intel host with legacy LBR; else why not.

    The LBR format is IA32_PERF_CAPABILITIES (MSR 0x345) bits 0-5; QEMU wants it
    as lbr-fmt. Arch LBR hosts (Sapphire Rapids+) give KVM guests no LBR.
    """
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return [], "cannot read /proc/cpuinfo"
    if "GenuineIntel" not in cpuinfo:
        return [], "host CPU is not Intel: KVM passes no LBR to guests"
    if not Path("/sys/bus/event_source/devices/cpu/caps/branches").exists():
        return [], "host PMU has no LBR (no /sys/bus/event_source/devices/cpu/caps/branches)"
    try:
        with open("/dev/cpu/0/msr", "rb") as msr:
            msr.seek(0x345)
            caps = int.from_bytes(msr.read(8), "little")
    except OSError as exc:
        return [], f"cannot read IA32_PERF_CAPABILITIES (modprobe msr?): {exc.strerror}"
    fmt = caps & 0x3F
    if fmt == 0x3F:
        return [], "host uses Arch LBR: KVM gives guests no LBR"
    return ["-cpu", f"host,pmu=on,lbr-fmt={fmt:#x}"], f"LBR passthrough lbr-fmt={fmt:#x}"


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
            print(f"[vm] {wanted} is in use by another run; using {path}", file=sys.stderr)
        return path
    raise VmError(f"no free results directory next to {wanted}")


_held_locks: list[int] = []


@dataclass
class VmPlan:
    """Everything decided before boot; `command` is what --dry-run prints."""

    kernel: Path
    results: Path
    command: list[str]
    accel: str
    lbr: str


def build_command(
    kernel: Path,
    results: Path,
    pytest_args: Sequence[str],
    *,
    memory: str = "2G",
    cpus: int | None = None,
    kvm: bool | None = None,
    append: str = "",
    rw: Sequence[Path] = (),
    kernel_log: bool = False,
) -> VmPlan:
    """The vng command line that runs pytest in the guest."""
    vng = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    if kvm is None:
        kvm, accel_why = kvm_usable(kernel)
    else:
        accel_why = "forced by option"
    if cpus is None:
        # Under TCG one vCPU: ftrace's code patching (int3 + static calls) raced with
        # a second TCG vCPU and oopsed the 6.12 guest in __schedule ("Oops: int3" on
        # tracefs instance removal), and patching 40k call sites is faster without IPIs.
        cpus = 2 if kvm else 1
    qemu_opts: list[str] = []
    lbr_why = "TCG guest: no PMU, so no LBR"
    if kvm:
        qemu_opts, lbr_why = lbr_passthrough_opts()
    guest = [
        sys.executable,
        "-m",
        "pytest_lbr.vm",
        "guest",
        "--results",
        str(results),
        "--",
        *pytest_args,
    ]
    cmd = [
        vng,
        "--run",
        str(kernel),
        "--memory",
        memory,
        "--cpus",
        str(cpus),
        "--rwdir",
        str(results),
    ]
    for path in rw:
        cmd += ["--rwdir", str(path)]
    if not kvm:
        cmd.append("--disable-kvm")
    if qemu_opts:
        cmd += ["--qemu-opts", " ".join(qemu_opts)]
    if append:
        cmd += ["--append", append]
    if kernel_log:  # the kernel's console (boot, oops, panic) into the console log
        cmd.append("--verbose")
    cmd += ["--exec", f"cd {shlex.quote(str(REPO))} && {shlex.join(guest)}"]
    accel = f"{'KVM' if kvm else 'TCG'} ({accel_why})"
    return VmPlan(kernel, results, cmd, accel, lbr_why)


def run_vm(plan: VmPlan, *, timeout: float = 1500.0, boot_timeout: float = 300.0) -> int:
    """Run the plan; return pytest's exit status from the guest.

    Raises VmError (with the console tail) when the guest never reports a status:
    it did not start within `boot_timeout`, panicked, or ran past `timeout`.
    """
    plan.results.mkdir(parents=True, exist_ok=True)
    for name in (STARTED, STATUS):
        (plan.results / name).unlink(missing_ok=True)
    console_path = plan.results / "console.log"
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    start = time.monotonic()
    with open(console_path, "wb") as console:
        proc = subprocess.Popen(
            plan.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        why = ""
        while True:
            chunk = proc.stdout.read()
            if chunk:
                console.write(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            if proc.poll() is not None:
                rest = proc.stdout.read() or b""
                console.write(rest)
                sys.stdout.buffer.write(rest)
                break
            elapsed = time.monotonic() - start
            if elapsed > boot_timeout and not (plan.results / STARTED).exists():
                why = f"guest did not boot within {boot_timeout:.0f}s"
            elif elapsed > timeout:
                why = f"guest ran past the {timeout:.0f}s limit (hang?)"
            if why:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.2)
    status_file = plan.results / STATUS
    if status_file.exists():
        return int(status_file.read_text().strip() or EXIT_NO_GUEST)
    if not why:
        started = (plan.results / STARTED).exists()
        why = f"guest exited (vng status {proc.returncode}) without reporting pytest's status: " + (
            "it panicked or was killed mid-run" if started else "it failed to boot"
        )
    tail = console_path.read_bytes().decode(errors="replace").strip().splitlines()[-15:]
    hint = (
        ""
        if "--verbose" in plan.command
        else " (rerun with --kernel-log to see the kernel console)"
    )
    raise VmError(
        f"{plan.kernel.name}: {why}; console in {console_path}{hint}:\n  " + "\n  ".join(tail)
    )


@dataclass
class GuestSummary:
    """Counts from a guest's JUnit XML, split into kernel tests and the rest."""

    kernel_ran: int = 0
    kernel_failed: int = 0
    kernel_skipped: int = 0
    other_ran: int = 0
    other_failed: int = 0
    other_skipped: int = 0


def summarize_junit(path: Path) -> GuestSummary:
    """Count testcases; kernel tests are those under tests/kernel or examples/."""
    s = GuestSummary()
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = case.get("classname", "")
        kernel = cls.startswith(("tests.kernel", "examples"))
        if case.find("skipped") is not None:
            attr = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            attr = "failed"
        else:
            attr = "ran"
        name = f"{'kernel' if kernel else 'other'}_{attr}"
        setattr(s, name, getattr(s, name) + 1)
    return s


# -- guest side ------------------------------------------------------------------


def _mount(fstype: str, target: str) -> None:
    if os.path.ismount(target):
        return
    os.makedirs(target, exist_ok=True)
    subprocess.run(["mount", "-t", fstype, fstype, target], check=False)


def guest_main(results: Path, pytest_args: list[str]) -> int:
    """Inside the VM: mount, run pytest, save dmesg, write the status file."""
    (results / STARTED).write_text(f"{platform.release()}\n")
    _mount("bpf", "/sys/fs/bpf")
    _mount("tracefs", "/sys/kernel/tracing")
    _mount("debugfs", "/sys/kernel/debug")
    # The guest's own scratch space: the host's /tmp shared over 9p breaks pytest's
    # unlinked temporary files (capture), so tmp_path and TMPDIR live in guest RAM.
    tmpdir = Path("/run/pytest-lbr-tmp")
    tmpdir.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(tmpdir):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1G", "tmpfs", str(tmpdir)], check=False)
    env = dict(
        os.environ,
        TMPDIR=str(tmpdir),
        PYTEST_LBR_GUEST="1",
        PYTEST_LBR_STRICT="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTEST_LBR_RESULTS=str(results),
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--junitxml={results / 'junit.xml'}",
        *pytest_args,
    ]
    print(f"[guest {platform.release()}] {shlex.join(cmd)}", flush=True)
    status = subprocess.run(cmd, env=env, check=False).returncode
    dmesg = subprocess.run(["dmesg"], capture_output=True, check=False)
    (results / "dmesg.txt").write_bytes(dmesg.stdout)
    (results / STATUS).write_text(f"{status}\n")
    return status


# -- command line ----------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m pytest_lbr.vm run|guest ...` (ci/qemu/run is `run`)."""
    parser = argparse.ArgumentParser(prog="ci/qemu/run", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="boot a kernel and run pytest in it")
    run.add_argument("--kernel", required=True, help="6.1, 6.12 or a kernel image path")
    run.add_argument(
        "--results", type=Path, help="results dir (default: results/<kernel image name>)"
    )
    run.add_argument("--memory", default="2G")
    run.add_argument("--cpus", type=int, help="vCPUs (default: 2 with KVM, 1 under TCG)")
    run.add_argument("--timeout", type=float, default=1500.0, help="whole-run limit, seconds")
    run.add_argument(
        "--boot-timeout", type=float, default=300.0, help="limit for the guest to start"
    )
    run.add_argument("--append", default="", help="extra kernel command line")
    run.add_argument(
        "--rw",
        type=Path,
        action="append",
        default=[],
        help="also make this host directory writable in the guest (e.g. to update golden files)",
    )
    accel = run.add_mutually_exclusive_group()
    accel.add_argument("--kvm", dest="kvm", action="store_true", default=None, help="force KVM")
    accel.add_argument("--tcg", dest="kvm", action="store_false", help="force TCG (no KVM)")
    run.add_argument(
        "--kernel-log", action="store_true", help="show the kernel console (to debug a panic)"
    )
    run.add_argument("--dry-run", action="store_true", help="print the command and exit")
    run.add_argument("pytest_args", nargs="*", help="arguments for pytest in the guest (after --)")
    guest = sub.add_parser("guest", help="(inside the VM) run pytest and report")
    guest.add_argument("--results", type=Path, required=True)
    guest.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)

    if args.cmd == "guest":
        return guest_main(args.results, args.pytest_args)
    try:
        kernel = resolve_kernel(args.kernel)
        results = claim_results_dir(args.results or REPO / "results" / kernel.name)
        plan = build_command(
            kernel,
            results,
            args.pytest_args,
            memory=args.memory,
            cpus=args.cpus,
            kvm=args.kvm,
            append=args.append,
            rw=[p.resolve() for p in args.rw],
            kernel_log=args.kernel_log,
        )
        if args.dry_run:
            print(shlex.join(plan.command))
            return 0
        print(f"[vm] {kernel.name}: {plan.accel}; {plan.lbr}; results in {results}", flush=True)
        status = run_vm(plan, timeout=args.timeout, boot_timeout=args.boot_timeout)
    except VmError as exc:
        print(f"[vm] error: {exc}", file=sys.stderr)
        return EXIT_NO_GUEST
    junit = results / "junit.xml"
    if junit.exists():
        s = summarize_junit(junit)
        print(
            f"[vm] {kernel.name}: kernel tests ran in the guest: {s.kernel_ran} passed, "
            f"{s.kernel_failed} failed, {s.kernel_skipped} skipped; "
            f"other tests: {s.other_ran} passed, {s.other_failed} failed, {s.other_skipped} skipped",
            flush=True,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
