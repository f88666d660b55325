"""`pytest-lbr vm`: boot kernels with virtme-ng and run pytest (or any command) in them.

Host side (`pytest-lbr vm --kernel 6.1 --kernel 6.12 -- PYTEST ARGS`): picks
each kernel image, KVM or TCG, LBR passthrough where the host has it, runs one
`vng` guest per kernel (side by side, bounded by the host's cores), watches for
boot and for the end, fails a guest whose kernel log holds a splat its pytest did not
report, and prints one summary with one exit status (the worst).
The guest starts in the caller's working directory (virtme-ng shares the host's
root filesystem read-only), so relative paths and node ids are as on the host;
only the results directory and `--rw` directories are writable.

Guest side (`python -m pytest_lbr.vm guest ...`, started by vng --exec): mounts
bpffs/tracefs/debugfs, runs pytest (JUnit XML, the trace report) or the command,
saves dmesg and writes the exit status to the results directory: that file is
the status channel, so a guest that never got there (no boot, panic, hang) is
told apart from a failing test.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pytest_lbr.capture.tracer_object import object_arch
from pytest_lbr.guest import (
    ENV_GUEST,
    ENV_RESULTS,
    ENV_STRICT,
    ENV_TALLY_OWNER,
    SPLATS_FILE,
    Shard,
    Tally,
    read_noted_splats,
    read_tally,
)
from pytest_lbr.kernel.kmsg import Splat, find_splats
from pytest_lbr.symbols.cache import cache_dir
from pytest_lbr.vm_root import GuestRoot, RootError, machine_name

__all__ = [
    "EXIT_NO_GUEST",
    "EXIT_SKIP",
    "GuestResult",
    "VmError",
    "VmPlan",
    "build_command",
    "kvm_usable",
    "lbr_passthrough_opts",
    "main",
    "resolve_kernel",
    "run_vm",
    "unreported_splats",
    "worst_status",
]

STARTED = "started"
STATUS = "status"
#: Where a guest with a root of its own mounts a writable directory that lies inside
#: the working directory, before `guest --bind` puts it in place.
_ASIDE = Path("/var/lib/pytest-lbr")
#: Exit status when a guest never reported one (no boot, panic, hang, a tool missing).
#: Not one of pytest's own (0-5), so a caller can tell "the guest never ran" apart.
EXIT_NO_GUEST = 6
#: `git bisect run`'s "cannot test this commit": every infrastructure failure under --bisect.
EXIT_SKIP = 125
#: Results directory, relative to the caller's working directory.
DEFAULT_RESULTS = "lbr-results"

_print_lock = threading.Lock()


class VmError(RuntimeError):
    """The VM could not be set up or did not report back; the message says why."""


def _say(message: str) -> None:
    with _print_lock:
        print(f"[vm] {message}", file=sys.stderr, flush=True)


# -- host side -------------------------------------------------------------------


def resolve_kernel(spec: str) -> Path:
    """What vng boots for a --kernel value.

    '6.1' / '6.12': the newest installed /boot/vmlinuz-<series>.*; a file: that
    image; a directory: a kernel tree built with `vng --build` (vng boots it
    with its modules).
    """
    if re.fullmatch(r"\d+\.\d+", spec):
        found = sorted(
            glob.glob(f"/boot/vmlinuz-{spec}.*"),
            key=lambda p: [int(x) if x.isdigit() else 0 for x in re.split(r"[.-]", p)],
        )
        if not found:
            raise VmError(
                f"no kernel {spec} installed (/boot/vmlinuz-{spec}.*): install one "
                f"(Debian: apt-get install linux-image-{spec}-amd64 or linux-image-amd64) "
                "or pass --kernel PATH"
            )
        return Path(found[-1])
    path = Path(spec)
    if path.is_dir():
        if _boot_image(path) == path:
            raise VmError(f"{spec} is a directory but not a built kernel tree (vng --build)")
        return path.resolve()
    if not path.is_file():
        raise VmError(f"kernel image {spec!r} does not exist")
    return path.resolve()


def kernel_label(spec: str) -> str:
    """The results subdirectory and summary name of a kernel: its series, or the file
    or directory name as given (not where a symlink leads)."""
    return spec if re.fullmatch(r"\d+\.\d+", spec) else Path(spec).name or Path(spec).resolve().name


def _boot_image(kernel: Path) -> Path:
    """The bootable image of a kernel (the bzImage inside a built tree)."""
    if kernel.is_dir():
        for name in ("bzImage", "Image"):
            image = kernel / "arch" / object_arch() / "boot" / name
            if image.exists():
                return image
    return kernel


#: Debian's package holding each architecture's qemu-system-<machine>.
_QEMU_PACKAGE = {"x86_64": "qemu-system-x86", "aarch64": "qemu-system-arm"}


def find_tools(root: GuestRoot | None = None) -> Path:
    """vng's path; VmError naming what to install when vng, QEMU or busybox is missing.

    With a guest `root`, QEMU is the one for its architecture and busybox the root's own.
    """
    here = Path(sys.executable).parent
    vng = shutil.which("vng") or (str(here / "vng") if (here / "vng").exists() else None)
    if vng is None:
        raise VmError("virtme-ng is not installed: pip install 'pytest-lbr[vm]'")
    machine = root.machine if root else platform.machine()
    qemu = f"qemu-system-{machine}"
    if shutil.which(qemu) is None:
        package = _QEMU_PACKAGE.get(machine, qemu)
        raise VmError(f"{qemu} is not installed: apt-get install {package} (Debian/Ubuntu)")
    if root is not None:
        if not any((root.path / d / "busybox").exists() for d in ("bin", "usr/bin", "sbin")):
            raise VmError(
                f"virtme-ng needs busybox in the guest root: chroot {root.path} "
                "apt-get install busybox-static"
            )
    elif shutil.which("busybox") is None:
        raise VmError("virtme-ng needs busybox: apt-get install busybox-static (Debian/Ubuntu)")
    return Path(vng)


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
    # "2": the reason's wording (older probes cached the firmware's screen as the reason).
    key = hashlib.sha1(f"2|{os.uname().release}|{qemu}|{kernel}".encode()).hexdigest()[:12]
    cache = cache_dir() / f"kvm-probe-{key}.json"
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
        out = subprocess.run(cmd, capture_output=True, timeout=timeout)
        stdout, stderr, timed_out = out.stdout, out.stderr, False
    except subprocess.TimeoutExpired as exc:
        # What QEMU wrote before it was killed: KVM's own error is on stderr.
        stdout, stderr, timed_out = exc.stdout or b"", exc.stderr or b"", True
    console = _text(stdout)
    usable = "Linux version" in console
    why = (
        "KVM boots a stock kernel"
        if usable
        else "KVM cannot boot a stock kernel here: "
        + kvm_failure(console, _text(stderr), timeout if timed_out else None)
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"usable": usable, "why": why}))
    return usable, why


def _text(output: bytes | str) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def kvm_failure(console: str, stderr: str, timed_out: float | None = None) -> str:
    """The line that says why a KVM boot failed, from QEMU's console and stderr.

    KVM's own error first (`KVM internal error. Suberror: 1` and the reason a few
    lines below it, `emulation failure`), then QEMU's (`qemu-system-x86_64: error:
    failed to set MSR ...`); never the firmware's screen and its escape codes.
    """
    lines = [ln.strip() for ln in strip_escapes(stderr).splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("KVM internal error"):
            # The register dump follows; the reason is the one lower-case phrase before it.
            reason = next(
                (r for r in lines[i + 1 : i + 12] if re.fullmatch(r"[a-z][a-z ]+", r)), ""
            )
            return f"{line} ({reason})" if reason else line
    qemu = [ln for ln in lines if re.match(r"qemu-system-\S+: ", ln) and ": warning: " not in ln]
    if qemu:
        return qemu[0]
    if timed_out is not None:
        return f"no kernel output within {timed_out:.0f}s"
    shown = lines or [ln.strip() for ln in strip_escapes(console).splitlines() if ln.strip()]
    return shown[0] if shown else "QEMU exited without output"


#: ANSI/VT escape sequences (CSI `ESC [ ... m`, OSC `ESC ] ... BEL`, two-byte `ESC c`)
#: and the other control characters but tab and newline: what QEMU, SeaBIOS and a
#: kernel console write for a terminal, and a message quoting them must not carry.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f]"
)


def strip_escapes(text: str) -> str:
    """`text` without terminal escape sequences and control characters (but \\t, \\n)."""
    return _ESCAPES.sub("", text.replace("\r\n", "\n"))


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
            _say(f"{wanted} is in use by another run; using {path}")
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
        kvm, accel_why = kvm_usable(_boot_image(kernel))
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
        # line cache (a cold debug-vmlinux lookup costs each session seconds under TCG).
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


#: The variables the guest gets from the host, as JSON in its results directory: written
#: before boot, read and deleted by the guest side. Not on the command line: vng carries
#: --exec on the kernel command line, which is short (2048 bytes on x86-64).
GUEST_ENV_FILE = ".guest-env.json"

#: PYTEST_* variables that describe a pytest process, not what the user asks for: pytest
#: and pytest-xdist set them in each test process (a test that runs `pytest-lbr vm`).
_PYTEST_PROCESS_STATE = frozenset(
    {
        "PYTEST_CURRENT_TEST",
        "PYTEST_VERSION",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
    }
)
#: What the guest side sets itself.
_GUEST_OWN = frozenset({ENV_GUEST, ENV_STRICT, ENV_RESULTS, ENV_TALLY_OWNER})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_option(text: str) -> tuple[str, str | None]:
    """`--env NAME=VALUE` or `--env NAME` (the host's value) as (NAME, VALUE or None)."""
    name, eq, value = text.partition("=")
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"--env {text!r}: expected NAME=VALUE or NAME (letters, digits, _)")
    return name, value if eq else None


def guest_environment(
    host: Mapping[str, str], wanted: Sequence[tuple[str, str | None]] = ()
) -> tuple[dict[str, str], list[str]]:
    """The variables a guest gets, and the `--env NAME`s the host does not have.

    Like `docker run -e`: the host's environment stays outside, but for its PYTEST_*
    variables (PYTEST_ADDOPTS, PYTEST_PLUGINS, ...; not pytest's per-process ones nor
    the guest's own PYTEST_LBR_GUEST/STRICT/RESULTS), then each `--env` in order:
    NAME=VALUE, or NAME with the host's value (left out, and named, when unset here).
    """
    env = {
        k: v
        for k, v in host.items()
        if k.startswith("PYTEST_") and k not in _PYTEST_PROCESS_STATE | _GUEST_OWN
    }
    unset = []
    for name, value in wanted:
        if value is None:
            if name not in host:
                unset.append(name)
                continue
            value = host[name]
        env[name] = value
    return env, unset


def _write_guest_env(results: Path, env: Mapping[str, str]) -> None:
    path = results / GUEST_ENV_FILE
    path.unlink(missing_ok=True)
    if env:
        # Only this user reads it (values may be tokens); the guest deletes it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(dict(env), out)


def _read_guest_env(results: Path) -> dict[str, str]:
    """Inside the guest: the variables the host passed (once: the file is deleted)."""
    path = results / GUEST_ENV_FILE
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    path.unlink(missing_ok=True)
    return {str(k): str(v) for k, v in env.items()}


class _Echo:
    """Copies what a guest prints to its console log and to stdout.

    With a prefix (several guests at once) whole lines are echoed, each prefixed,
    so guests' lines never interleave mid-line; a partial line (pytest -q's dots)
    waiting longer than `hold` seconds is echoed anyway, so progress shows.
    """

    def __init__(self, console: BinaryIO, prefix: str | None, hold: float = 5.0) -> None:
        self.console = console
        self.prefix = prefix.encode() if prefix is not None else None
        self.hold = hold
        self._partial = b""
        self._since = 0.0

    def feed(self, chunk: bytes, final: bool = False) -> None:
        """Take one chunk of output; `final` flushes a last unterminated line."""
        if chunk:
            self.console.write(chunk)
            self.console.flush()  # the log is how one follows a long run
        if self.prefix is None:
            self._write(chunk)
            return
        lines = (self._partial + chunk).splitlines(keepends=True)
        keep = b"" if not lines or lines[-1].endswith(b"\n") else lines.pop()
        if keep and not self._partial:
            self._since = time.monotonic()
        self._partial = keep
        if self._partial and (final or time.monotonic() - self._since > self.hold):
            lines.append(self._partial + b"\n")
            self._partial = b""
        self._write(b"".join(self.prefix + line for line in lines))

    def _write(self, out: bytes) -> None:
        if out:
            with _print_lock:
                sys.stdout.buffer.write(out)
                sys.stdout.flush()


def run_vm(
    plan: VmPlan,
    *,
    timeout: float = 1500.0,
    boot_timeout: float = 300.0,
    prefix: str | None = None,
) -> int:
    """Run the plan; return the guest command's exit status.

    Raises VmError (with the console tail) when the guest never reports a status:
    it did not start within `boot_timeout`, panicked, or ran past `timeout`.
    """
    plan.results.mkdir(parents=True, exist_ok=True)
    for point in plan.mount_points:
        try:
            point.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VmError(
                f"cannot make the mount point {point} in the guest root: {exc.strerror} "
                "(run as the root's owner, or make it once with mkdir -p)"
            ) from None
    for name in (STARTED, STATUS, SPLATS_FILE):
        (plan.results / name).unlink(missing_ok=True)
    _write_guest_env(plan.results, plan.env)
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
        echo = _Echo(console, prefix)
        why = ""
        _guests.add(proc.pid)
        try:
            while True:
                echo.feed(proc.stdout.read() or b"")
                if proc.poll() is not None:
                    echo.feed(proc.stdout.read() or b"", final=True)
                    break
                elapsed = time.monotonic() - start
                if elapsed > boot_timeout and not (plan.results / STARTED).exists():
                    why = f"guest did not boot within {boot_timeout:.0f}s"
                elif elapsed > timeout:
                    why = f"guest ran past the {timeout:.0f}s limit (hang?)"
                if why:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    echo.feed(b"", final=True)
                    break
                time.sleep(0.2)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing else stops it
            raise
        finally:
            _guests.discard(proc.pid)
    status_file = plan.results / STATUS
    if status_file.exists():
        return int(status_file.read_text().strip() or EXIT_NO_GUEST)
    if not why:
        started = (plan.results / STARTED).exists()
        why = f"guest exited (vng status {proc.returncode}) without reporting a status: " + (
            "it panicked or was killed mid-run" if started else "it failed to boot"
        )
    # Quoted in a message: the console's escape codes (firmware, kernel) left out.
    text = strip_escapes(console_path.read_bytes().decode(errors="replace"))
    tail = text.strip().splitlines()[-15:]
    hint = (
        ""
        if "--verbose" in plan.command
        else " (rerun with --kernel-log to see the kernel console)"
    )
    raise VmError(f"{plan.label}: {why}; console in {console_path}{hint}:\n  " + "\n  ".join(tail))


#: Process groups of the guests running now. Each runs in its own session, so Ctrl-C
#: (or a stopped `pytest-lbr bisect`) reaches only this process, which must stop them.
_guests: set[int] = set()


def _stop_guests() -> None:
    for group in list(_guests):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class GuestResult:
    """How one kernel's guest ended."""

    label: str
    status: int
    results: Path
    tally: Tally | None = None
    error: str = ""
    #: Why the guest failed though its command passed (a kernel splat pytest did not see).
    note: str = ""

    def line(self) -> str:
        """One summary line: counts, and the exit status."""
        if self.error:
            return f"{self.label}: no result: {self.error.splitlines()[0]} (exit {self.status})"
        note = f"; {self.note}" if self.note else ""
        if self.tally is None:
            return f"{self.label}: exit {self.status} (results in {self.results}){note}"
        t = self.tally
        # Both counts say what they count: a suite whose tests use the `lbr` fixture
        # without the kernel marker traced, though no kernel-marked test ran.
        return (
            f"{self.label}: {t.passed} passed, {t.failed} failed, {t.skipped} skipped; "
            f"ran with tracing: {t.traced}, ran marked kernel: {t.kernel_ran} "
            f"(exit {self.status}; results in {self.results})" + note
        )


#: From best to worst: a run's status is its worst guest's.
_SEVERITY = [0, 5, 1, 2, 4, 3]


def worst_status(statuses: Sequence[int]) -> int:
    """The status that says most: any failure beats success, a missing guest beats all."""
    if not statuses:
        return EXIT_NO_GUEST

    def rank(status: int) -> int:
        return _SEVERITY.index(status) if status in _SEVERITY else len(_SEVERITY)

    return max(statuses, key=rank)


def unreported_splats(results: Path) -> list[Splat]:
    """Kernel splats in a guest's saved kernel log (dmesg.txt) its pytest did not report:
    at boot, before or after the session, or in a command run with --exec."""
    try:
        text = (results / "dmesg.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    noted = read_noted_splats(results)
    return [splat for splat in find_splats(text.splitlines()) if splat.key not in noted]


def _splats_off(pytest_args: Sequence[str]) -> bool:
    for i, arg in enumerate(pytest_args):
        if arg == "--lbr-kernel-splats=off" or (
            arg == "--lbr-kernel-splats" and pytest_args[i + 1 : i + 2] == ["off"]
        ):
            return True
    return False


def bisect_status(status: int) -> int:
    """`git bisect run`'s view of a status: 0 good, 1 bad, anything else 125 (skip)."""
    return status if status in (0, 1) else EXIT_SKIP


# -- guest side ------------------------------------------------------------------


def _mount(fstype: str, target: str) -> None:
    if os.path.ismount(target):
        return
    os.makedirs(target, exist_ok=True)
    subprocess.run(["mount", "-t", fstype, fstype, target], check=False)


def guest_main(
    results: Path,
    args: list[str],
    *,
    execute: str | None = None,
    strict: bool = True,
    cache: Path | None = None,
    binds: Sequence[tuple[Path, Path]] = (),
) -> int:
    """Inside the VM: mount, run pytest (or the command), save dmesg, write the status file.

    `cache`: the host's pytest-lbr cache directory (writable here, in guest RAM).
    `binds`: (mounted at, belongs at) of writable directories mounted aside.
    """
    from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS, TracefsError, find_tracefs, mount_tracefs

    for source, target in binds:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=False)
    (results / STARTED).write_text(f"{platform.release()}\n")
    _mount("bpf", "/sys/fs/bpf")
    # The graph backend only looks tracefs up: mounting it is this set-up's job
    # (at the usual place, where tests/kernel looks too).
    if find_tracefs() != Path(TRACEFS_MOUNTS[0]):
        try:
            where = f"mounted tracefs at {mount_tracefs()}"
        except TracefsError as exc:
            where = exc.strerror or str(exc)  # tests that need it then skip saying why
        print(f"[guest {platform.release()}] {where}", flush=True)
    _mount("debugfs", "/sys/kernel/debug")
    # The guest's own scratch space: the host's /tmp shared over 9p breaks pytest's
    # unlinked temporary files (capture), so tmp_path and TMPDIR live in guest RAM.
    tmpdir = Path("/run/pytest-lbr-tmp")
    tmpdir.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(tmpdir):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1G", "tmpfs", str(tmpdir)], check=False)
    env = dict(os.environ)
    env.update(_read_guest_env(results))  # the host's PYTEST_* and --env; the rest wins
    env.update(
        # The venv's scripts (pytest-lbr, pytest) first, as where `pytest-lbr vm` ran.
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}",
        TMPDIR=str(tmpdir),
        # Bytecode, and pytest's assertion-rewritten plugin modules (all of pytest-lbr's
        # and hypothesis's), cached in guest RAM rather than never: every pytest a test
        # starts would otherwise rewrite ~80 modules again, seconds each under TCG.
        PYTHONPYCACHEPREFIX=str(tmpdir / "pycache"),
        **{ENV_GUEST: "1", ENV_STRICT: "1" if strict else "0", ENV_RESULTS: str(results)},
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop(
        ENV_TALLY_OWNER, None
    )  # this guest's pytest writes its tally (a host pytest may have set it)
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache.parent)  # the same cache whatever $HOME is here
    if execute is not None:
        cmd = ["sh", "-c", execute]
    else:
        # -P: like the `pytest` command, not `python -m pytest`, the working directory is
        # not put on sys.path (a checkout of the plugin must not shadow the installed one).
        cmd = [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider"]
        cmd.append(f"--junitxml={results / 'junit.xml'}")
        if not any(a == "--lbr-report" or a.startswith("--lbr-report=") for a in args):
            cmd.append(f"--lbr-report={results / 'report'}")
        cmd += args
    print(f"[guest {platform.release()}] {shlex.join(cmd)}", flush=True)
    status = subprocess.run(cmd, env=env, check=False).returncode
    dmesg = subprocess.run(["dmesg"], capture_output=True, check=False)
    (results / "dmesg.txt").write_bytes(dmesg.stdout)
    (results / STATUS).write_text(f"{status}\n")
    return status


# -- command line ----------------------------------------------------------------

USAGE = """pytest-lbr vm [--kernel K]... [options] [-- PYTEST ARGS]
       pytest-lbr vm --kernel K --exec "COMMAND"
"""


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--shard {text!r}: ")) from None


def _env(text: str) -> tuple[str, str | None]:
    try:
        return env_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--env {text!r}: ")) from None


def build_parser() -> argparse.ArgumentParser:
    """The `pytest-lbr vm` options."""
    parser = argparse.ArgumentParser(
        prog="pytest-lbr vm",
        usage=USAGE,
        description="Boot kernels with virtme-ng and run pytest (or a command) in each, as root, "
        "in this directory. Exit status: pytest's (the worst over kernels); "
        f"{EXIT_NO_GUEST} when a guest never reported (no boot, panic, hang, tool missing).",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="K",
        help="6.1, 6.12 (newest installed /boot/vmlinuz-<series>.*), a kernel image, or a "
        "tree built with vng --build; repeat for several (default: 6.12)",
    )
    parser.add_argument(
        "--arch",
        help="the guest's architecture: x86_64 (the default on an x86-64 host) or arm64, "
        "emulated, from its own --root",
    )
    parser.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="boot this root file system (with Python and pytest-lbr installed) instead of "
        "the host's; --kernel 6.1 then means its boot/vmlinuz-6.1.* (default: its newest)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help=f"results directory; one subdirectory per kernel (default: ./{DEFAULT_RESULTS})",
    )
    parser.add_argument(
        "--rw",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="make this directory writable in the guest (e.g. to update golden files)",
    )
    parser.add_argument("--exec", dest="execute", metavar="COMMAND", help="run COMMAND, not pytest")
    parser.add_argument(
        "--env",
        "-e",
        type=_env,
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="set NAME in the guest (to VALUE, or to its value here), like docker run -e; "
        "repeatable. The guest gets none of this environment but its PYTEST_* variables "
        "(PYTEST_ADDOPTS, PYTEST_PLUGINS, ...)",
    )
    parser.add_argument("--shard", type=_shard, metavar="I/N", help="run shard I of N")
    parser.add_argument(
        "--bisect",
        action="store_true",
        help="exit 0 (good), 1 (bad) or 125 (skip: anything that is not a test verdict)",
    )
    parser.add_argument(
        "--no-strict",
        dest="strict",
        action="store_false",
        help="let kernel tests skip in the guest (default: a skip fails unless allow_skip)",
    )
    parser.add_argument(
        "--jobs", type=int, help="guests at once (default: as many as the host's cores hold)"
    )
    parser.add_argument("--memory", default="2G")
    parser.add_argument("--cpus", type=int, help="vCPUs per guest (default: 2)")
    parser.add_argument("--timeout", type=float, default=1500.0, help="whole-run limit, seconds")
    parser.add_argument(
        "--boot-timeout", type=float, default=300.0, help="limit for the guest to start"
    )
    parser.add_argument("--append", default="", help="extra kernel command line")
    accel = parser.add_mutually_exclusive_group()
    accel.add_argument("--kvm", dest="kvm", action="store_true", default=None, help="force KVM")
    accel.add_argument("--tcg", dest="kvm", action="store_false", help="force TCG (no KVM)")
    parser.add_argument(
        "--kernel-log", action="store_true", help="show the kernel console (to debug a panic)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return parser


def _guest_root(args: argparse.Namespace) -> GuestRoot | None:
    try:
        if args.root is not None:
            return GuestRoot.open(args.root, args.arch)
        if machine_name(args.arch) != platform.machine():
            raise VmError(
                f"--arch {args.arch} needs --root DIR: a root file system of that architecture "
                "with pytest-lbr installed (pytest-lbr's ci/qemu/arm64-root builds an arm64 one)"
            )
    except RootError as exc:
        raise VmError(str(exc)) from None
    return None


def _kernels(args: argparse.Namespace, guest_root: GuestRoot | None) -> list[tuple[Path, str]]:
    """(image, label) per kernel asked for; a guest root boots its own kernels."""
    if guest_root is None:
        return [(resolve_kernel(spec), kernel_label(spec)) for spec in args.kernel or ["6.12"]]
    arch = args.arch or guest_root.machine
    kernels = []
    for spec in args.kernel or [None]:
        try:
            image = guest_root.kernel(spec)
        except RootError as exc:
            raise VmError(str(exc)) from None
        if spec is None or re.fullmatch(r"\d+\.\d+", spec):
            series = spec or ".".join(re.findall(r"\d+", image.name)[:2])  # vmlinuz-6.1.0-28-arm64
            label = f"{arch}-{series}"
        else:
            label = kernel_label(spec)
        kernels.append((image, label))
    return kernels


def _plans(args: argparse.Namespace, pytest_args: list[str]) -> list[VmPlan]:
    guest_root = _guest_root(args)
    vng = find_tools(guest_root)
    root = (args.results or Path.cwd() / DEFAULT_RESULTS).resolve()
    if args.shard is not None:
        pytest_args = [f"--lbr-shard={args.shard}", *pytest_args]
    env, unset = guest_environment(os.environ, getattr(args, "env", []))
    for name in unset:
        _say(f"--env {name}: not set here, so not set in the guest (--env {name}=VALUE sets it)")
    plans = []
    for kernel, label in _kernels(args, guest_root):
        wanted = root / label
        results = wanted if args.dry_run else claim_results_dir(wanted)
        plans.append(
            build_command(
                kernel,
                results,
                pytest_args,
                label=label,
                execute=args.execute,
                memory=args.memory,
                cpus=args.cpus,
                kvm=args.kvm,
                append=args.append,
                rw=[p.resolve() for p in args.rw],
                kernel_log=args.kernel_log,
                strict=args.strict,
                vng=vng,
                root=guest_root,
                env=env,
            )
        )
    return plans


def _run_one(plan: VmPlan, args: argparse.Namespace, prefix: str | None) -> GuestResult:
    _say(f"{plan.label}: {plan.kernel}; {plan.accel}; {plan.lbr}; results in {plan.results}")
    if plan.env:
        _say(f"{plan.label}: environment from here: {', '.join(sorted(plan.env))}")
    try:
        status = run_vm(plan, timeout=args.timeout, boot_timeout=args.boot_timeout, prefix=prefix)
    except VmError as exc:
        _say(f"error: {exc}")
        return GuestResult(plan.label, EXIT_NO_GUEST, plan.results, error=str(exc))
    tally = None if args.execute is not None else read_tally(plan.results)
    result = GuestResult(plan.label, status, plan.results, tally)
    splats = unreported_splats(plan.results) if getattr(args, "check_splats", True) else []
    for splat in splats:
        _say(f"{plan.label}: kernel splat no test reported:\n  " + "\n  ".join(splat.lines))
    if splats:
        result.note = f"kernel splat no test reported: {splats[0].summary}"
        if status in (0, 5):  # a worse status already says the guest failed
            result.status = 1
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`pytest-lbr vm ...` (and, inside the VM, `python -m pytest_lbr.vm guest ...`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["guest"]:
        return _guest_cli(argv[1:])
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    if args.execute is not None and pytest_args:
        _say("error: --exec runs a command instead of pytest: drop the pytest arguments after --")
        return 4
    try:
        plans = _plans(args, pytest_args)
    except VmError as exc:
        _say(f"error: {exc}")
        return EXIT_SKIP if args.bisect else EXIT_NO_GUEST
    if args.dry_run:
        for plan in plans:
            print(shlex.join(plan.command))
        return 0
    args.check_splats = not _splats_off(pytest_args)
    busiest = max(plan.host_cpus for plan in plans)
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // max(1, busiest))
    prefixed = len(plans) > 1 and jobs > 1
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            try:
                results = list(
                    pool.map(
                        lambda p: _run_one(p, args, f"[{p.label}] " if prefixed else None), plans
                    )
                )
            except KeyboardInterrupt:
                _stop_guests()  # before the pool waits for its threads, which wait for guests
                raise
    except KeyboardInterrupt:
        _say("interrupted: guests stopped")
        return 130
    for r in results:
        _say(r.line())
    status = worst_status([r.status for r in results])
    if args.bisect:
        status = bisect_status(status)
    if len(results) > 1:
        _say(f"exit {status} (the worst of {', '.join(f'{r.label}: {r.status}' for r in results)})")
    return status


def _guest_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_lbr.vm guest")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--exec", dest="execute")
    parser.add_argument("--no-strict", dest="strict", action="store_false")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--bind", action="append", default=[], metavar="MOUNTED:TARGET")
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    binds = [(Path(a), Path(b)) for a, _, b in (x.partition(":") for x in args.bind)]
    return guest_main(
        args.results,
        args.args,
        execute=args.execute,
        strict=args.strict,
        cache=args.cache,
        binds=binds,
    )


if __name__ == "__main__":
    sys.exit(main())
