"""Where the test BPF objects live, and a helper that builds them on demand.

Imported by the host tests (`from tests.bpf.objects import ...`); ci/setup
builds them with `make -C tests/bpf` before any test runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC_DIR = Path(__file__).resolve().parent
BUILD_DIR = SRC_DIR / "build"

# Constants of xdp_helpers.h, repeated here because Python cannot include C.
XDP_HELPERS_HDR = 8
XDP_HELPERS_DROP_BYTE = 0xFF
LAST_CSUM = 0
LAST_CPU = 1
# uapi enum xdp_action.
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = 0, 1, 2, 3


#: The selftest's test program (make -C bpf builds it into pytest_lbr/objects/).
SELFTEST_SOURCE = SRC_DIR.parents[1] / "bpf" / "lbr_selftest.bpf.c"


def selftest_call_lines(*helpers: str) -> list[int]:
    """The line of SELFTEST_SOURCE that calls each helper (`name(` on it, exactly once)."""
    lines = SELFTEST_SOURCE.read_text().splitlines()
    out = []
    for helper in helpers:
        (n,) = [i for i, text in enumerate(lines, 1) if f"{helper}(" in text]
        out.append(n)
    return out


def require_root() -> None:
    """Skip unless we may load BPF programs (root)."""
    if os.geteuid() != 0:
        pytest.skip("loading BPF programs needs root (CAP_BPF + CAP_SYS_ADMIN); run as root")


def bpf_object(name: str) -> Path:
    """Path of tests/bpf/build/NAME.bpf.o, built with make if missing or stale."""
    obj = BUILD_DIR / f"{name}.bpf.o"
    src = SRC_DIR / f"{name}.bpf.c"
    if obj.exists() and obj.stat().st_mtime >= src.stat().st_mtime:
        return obj
    if shutil.which("clang") is None or shutil.which("make") is None:
        pytest.skip(f"{obj} is not built and clang/make are missing (run bash ci/setup)")
    proc = subprocess.run(["make", "-s", "-C", str(SRC_DIR)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C tests/bpf failed:\n{proc.stdout}{proc.stderr}")
    return obj
