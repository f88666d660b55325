"""What a trace may leave behind in the kernel, read the same way by every test
that checks "nothing leaked": BPF program and link ids, and tracefs state."""

from __future__ import annotations

import json
import os
import subprocess

from pytest_lbr.kernel.tracefs import find_tracefs

#: tracefs files a trace could change: probe events, tracers, filters, the pid
#: list, and enabled_functions (every ftrace-attached function: fentry
#: trampolines, kprobes).
TRACEFS_FILES = (
    "kprobe_events",
    "uprobe_events",
    "dynamic_events",
    "current_tracer",
    "set_ftrace_filter",
    "set_ftrace_pid",
    "enabled_functions",
    "tracing_on",
)


def bpf_ids(kind: str) -> set[int]:
    """Ids of every loaded BPF object of `kind` ("prog", "link", "map")."""
    out = subprocess.run(
        ["bpftool", "-j", kind, "show"], capture_output=True, text=True, check=True
    ).stdout
    return {entry["id"] for entry in json.loads(out or "[]")}


def tracefs_state() -> dict[str, object]:
    """The instance names and the contents of `TRACEFS_FILES` (None: not there)."""
    root = find_tracefs()
    assert root is not None, "tracefs is not mounted"
    out: dict[str, object] = {"instances": sorted(os.listdir(root / "instances"))}
    for name in TRACEFS_FILES:
        path = root / name
        out[name] = path.read_text() if path.exists() else None
    return out
