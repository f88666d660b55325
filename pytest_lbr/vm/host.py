"""What this host offers a guest: the kernel to boot, the tools, KVM, LBR passthrough.

`resolve_kernel` turns a `--kernel` value into an image or a built tree,
`find_tools` names what to install when vng, QEMU or busybox is missing,
`kvm_usable` boots a stock kernel once to see whether KVM works (and quotes
KVM's or QEMU's own error when not), and `lbr_passthrough_opts` gives a KVM
guest the host's LBR where an Intel host has legacy LBR.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_lbr.capture.hooks.tracer_object import object_arch
from pytest_lbr.symbols.cache import cache_dir
from pytest_lbr.vm.messages import VmError
from pytest_lbr.vm.root import GuestRoot, is_release, pinned_missing

__all__ = [
    "boot_image",
    "find_tools",
    "kernel_label",
    "kvm_failure",
    "kvm_usable",
    "lbr_passthrough_opts",
    "resolve_kernel",
    "strip_escapes",
]


#: Where Debian's kernel packages put the images --kernel SERIES and RELEASE pick from.
BOOT = Path("/boot")


def resolve_kernel(spec: str) -> Path:
    """What vng boots for a --kernel value.

    '6.1' / '6.12': the newest installed /boot/vmlinuz-<series>.*; an exact release
    ('6.1.0-56-amd64', a pin): /boot/vmlinuz-<release>, or a one-line error saying how
    to install it; a file: that image; a directory: a kernel tree built with `vng
    --build` (vng boots it with its modules).
    """
    if is_release(spec):
        image = BOOT / f"vmlinuz-{spec}"
        if not image.is_file():
            raise VmError(pinned_missing(spec, BOOT, ""))
        return image
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
        if boot_image(path) == path:
            raise VmError(f"{spec} is a directory but not a built kernel tree (vng --build)")
        return path.resolve()
    if not path.is_file():
        raise VmError(f"kernel image {spec!r} does not exist")
    return path.resolve()


def kernel_label(spec: str) -> str:
    """The results subdirectory and summary name of a kernel: its series, or the file
    or directory name as given (not where a symlink leads)."""
    return spec if re.fullmatch(r"\d+\.\d+", spec) else Path(spec).name or Path(spec).resolve().name


def boot_image(kernel: Path) -> Path:
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
