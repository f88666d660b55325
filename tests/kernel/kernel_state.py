"""What a trace may leave behind in the kernel, read the same way by every test
that checks "nothing leaked": BPF program and link ids, and tracefs state;
`usage()`, the counts a long session watches for growth (bench/soak.py); and
`session_backend()`, a backend as a pytest session keeps it, the LBR one included
in guests without a PMU."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

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


def tracefs_left_behind(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """What `after` (a `tracefs_state()`) holds that `before` did not, file by file:
    functions enabled more often (enabled_functions: a leak adds; a hook of another
    test, released by the kernel later, only removes), instances that are new, any
    other file changed."""
    out: dict[str, object] = {}
    for key, now in after.items():
        was = before.get(key)
        if key == "enabled_functions" and isinstance(now, str) and isinstance(was, str):
            had = _enabled(was)  # once: tens of thousands of lines while a tracer runs
            more = {fn: n for fn, n in _enabled(now).items() if n > had.get(fn, 0)}
            if more:
                out[key] = more
        elif key == "instances" and isinstance(now, list) and isinstance(was, list):
            new = sorted(set(now) - set(was))  # another tracer's, closed meanwhile, is no leak
            if new:
                out[key] = new
        elif now != was:
            out[key] = (was, now)
    return out


def _enabled(text: str) -> dict[str, int]:
    # "vfs_write (1) R I  tramp: ..." -> {"vfs_write": 1}
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" (")
        count = rest.partition(")")[0]
        out[name] = int(count) if count.isdigit() else 1
    return out


def open_fds() -> tuple[int, int]:
    """(all, perf events): the open file descriptors of this process."""
    perf = 0
    fds = os.listdir("/proc/self/fd")
    for fd in fds:
        try:
            perf += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:  # the fd listdir itself had open, gone now
            pass
    return len(fds), perf


def rss_kib() -> int:
    """This process's resident set size (VmRSS), KiB, less what it has resident of
    BPF maps it mapped (a ring buffer's pages, mapped twice for wrap-around).

    A session keeping a program's hook keeps its ring buffer mapped (twice the
    ring: 8 MiB). That memory is the map's, bounded by its size and counted by
    `Usage.maps`; what is left is the memory a leak would grow.

    Measured after a garbage collection and glibc's `malloc_trim(0)`, which give
    back what was freed: a big temporary (the symbolizer merging its disk cache,
    which grows with every test of the session before) must not read as a leak,
    and what a leak holds cannot be given back."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS as it stands
        pass
    vm_rss = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                vm_rss = int(line.split()[1])
    if vm_rss is None:
        raise RuntimeError("no VmRSS in /proc/self/status")
    in_maps, bpf = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                bpf = line.rstrip().endswith("anon_inode:bpf-map")  # a mapping's header
            elif bpf and line.startswith("Rss:"):
                in_maps += int(line.split()[1])
    return vm_rss - in_maps


@dataclass(frozen=True)
class Usage:
    """What a session could pile up: its fds, the kernel's BPF objects and tracefs
    entries, and its memory (`rss_kib`). Every other field is a count of objects."""

    fds: int
    perf_fds: int
    progs: int
    links: int
    maps: int
    instances: int
    #: Lines of kprobe_events plus uprobe_events.
    probe_events: int
    rss_kib: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


#: The fields of `Usage` that count kernel objects or fds (all but the memory).
OBJECT_FIELDS = ("fds", "perf_fds", "progs", "links", "maps", "instances", "probe_events")


def usage() -> Usage:
    """The counts of `Usage` now."""
    root = find_tracefs()
    assert root is not None, "tracefs is not mounted"
    events = 0
    for name in ("kprobe_events", "uprobe_events"):
        path = root / name
        if path.exists():
            events += len(path.read_text().splitlines())
    fds, perf = open_fds()
    return Usage(
        fds=fds,
        perf_fds=perf,
        progs=len(bpf_ids("prog")),
        links=len(bpf_ids("link")),
        maps=len(bpf_ids("map")),
        instances=len(os.listdir(root / "instances")),
        probe_events=events,
        rss_kib=rss_kib(),
    )


def session_backend(name: str) -> Any:
    """The `Backend` a session keeps, for `Tracer(backend=...)`: "graph" as probed,
    or "lbr" on software perf events (`--lbr-pmu=software`, where there is no PMU):
    every hook, scope filter, ring buffer and release is real, the hits carry no
    branches. RuntimeError if it is unavailable here."""
    from pytest_lbr.capture import resolve_backend

    if name not in ("graph", "lbr"):
        raise ValueError(f"unknown backend {name!r}")
    backend = resolve_backend(name, pmu="software" if name == "lbr" else "hardware")
    if not backend.capability.available:
        raise RuntimeError(f"{name} backend unavailable: {backend.capability.reason}")
    return backend
