"""What the machine says about itself: CPU, LBR claims, kernel config, boot log.

Read once per selftest for the LBR presence verdict and the bundle; every reader
answers (None or empty) rather than raising, since a missing file is a fact too.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from pytest_lbr.kernel.machine import machine
from pytest_lbr.selftest.verdicts import LbrFacts

__all__ = ["CONFIG_KEYS", "kernel_config", "lbr_facts", "read_boot_log"]

#: The /proc/cpuinfo flags that bear on LBR: arch_lbr (Intel architectural LBR),
#: amd_lbr_v2 (AMD Zen 4 LBRv2), hypervisor (running in a VM).
_FLAGS = ("arch_lbr", "amd_lbr_v2", "hypervisor")
_DEEP_LBR = re.compile(r"(\d+)-deep LBR")

#: Kernel options the bundle records: what LBR snapshots, BPF tracing and the
#: function tracer depend on.
CONFIG_KEYS = (
    "CONFIG_PERF_EVENTS",
    "CONFIG_CPU_SUP_INTEL",
    "CONFIG_CPU_SUP_AMD",
    "CONFIG_PERF_EVENTS_AMD_BRS",
    "CONFIG_ARM64_BRBE",
    "CONFIG_BPF_SYSCALL",
    "CONFIG_BPF_JIT",
    "CONFIG_BPF_JIT_ALWAYS_ON",
    "CONFIG_DEBUG_INFO_BTF",
    "CONFIG_FUNCTION_GRAPH_TRACER",
    "CONFIG_DYNAMIC_FTRACE",
    "CONFIG_KPROBES",
    "CONFIG_FPROBE",
    "CONFIG_SECURITY_LOCKDOWN_LSM",
)


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = "", set[str]()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "CPU part") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def read_boot_log(path: str = "/dev/kmsg") -> list[str]:
    """The kernel log as far back as its ring buffer holds ([] when unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    lines: list[str] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten while reading: go on after it
                continue
            if not chunk:
                break
            lines.extend(chunk.decode("utf-8", "replace").splitlines())
    finally:
        os.close(fd)
    return lines


def lbr_facts(boot_log: list[str] | None = None) -> LbrFacts:
    """Read the machine's LBR claims (caps, cpuinfo flags, the boot log's "N-deep LBR")."""
    model, flags = _cpuinfo()
    caps = machine().lbr_caps
    depth = None
    for line in read_boot_log() if boot_log is None else boot_log:
        m = _DEEP_LBR.search(line)
        if m:
            depth = int(m[1])
    return LbrFacts(model, caps, tuple(f for f in _FLAGS if f in flags), depth)


def kernel_config(keys: tuple[str, ...] = CONFIG_KEYS) -> dict[str, str]:
    """`keys` from the running kernel's config (/proc/config.gz or /boot/config-RELEASE):
    "y", "m", a value, or "not set"; {} when neither file exists."""
    text = ""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        try:
            text = Path(f"/boot/config-{os.uname().release}").read_text()
        except OSError:
            return {}
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in keys:
            found[key] = value.strip('"')
    return {k: found.get(k, "not set") for k in keys}
