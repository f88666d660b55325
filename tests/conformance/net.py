"""What the network conformance tests share: which kernel this is, and the tun
device's node."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

TUN = Path("/dev/net/tun")
_TUN_MAJOR, _TUN_MINOR = 10, 200  # the misc device (Documentation/admin-guide/devices.txt)


def kernel_before(major: int, minor: int) -> bool:
    """True if the running kernel's version is below `major.minor` (6.1.0-56-amd64: 6.1)."""
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) < (major, minor)


def tun_device() -> Path:
    """/dev/net/tun, there to open: the tun module loaded, and the node made where the
    guest's /dev has none (a missing node cannot make the kernel load the module)."""
    if shutil.which("modprobe"):
        subprocess.run(["modprobe", "-q", "tun"], capture_output=True, check=False)
    if not TUN.exists():
        TUN.parent.mkdir(exist_ok=True)
        os.mknod(TUN, stat.S_IFCHR | 0o666, os.makedev(_TUN_MAJOR, _TUN_MINOR))
    return TUN
