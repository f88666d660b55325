"""tracefs: where it is mounted, mounting it, and private instances.

The graph backend records calls with the ftrace *function* tracer in its own
instance (``instances/pytest_lbr-<pid>-<n>``): the only way to get a call trace
that both Debian kernels here allow without touching the global tracer other
users share (``function_graph`` works in an instance only since the function
graph tracer's rework for several users, Linux 6.11). The text it
records is parsed by the graph backend.

Everything an `Instance` adds (the instance directory, enabled events, kprobe
and uprobe definitions) is removed by `Instance.close()`; instances left by a
killed process are removed by `cleanup_stale_instances()`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Iterable, Iterator
from ctypes import c_char_p, c_int, c_ulong, c_void_p
from pathlib import Path

from pytest_lbr.kernel.machine import libc

__all__ = [
    "INSTANCE_PREFIX",
    "Instance",
    "TRACEFS_MOUNTS",
    "TRACEFS_MOUNT_COMMAND",
    "TRACEFS_NOT_MOUNTED",
    "TracefsError",
    "cleanup_stale_instances",
    "find_tracefs",
    "mount_tracefs",
]

#: Instances are named INSTANCE_PREFIX-<pid>-<n>; probe groups pytest_lbr_<pid>_<n>.
INSTANCE_PREFIX = "pytest_lbr"
#: Where tracefs is mounted, the usual place first.
TRACEFS_MOUNTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
#: The command that mounts tracefs where `mount_tracefs()` does.
TRACEFS_MOUNT_COMMAND = f"mount -t tracefs nodev {TRACEFS_MOUNTS[0]}"
#: Why there is no tracefs, and the fix: one line for a capability or an error.
TRACEFS_NOT_MOUNTED = (
    f"tracefs is not mounted; mount it: {TRACEFS_MOUNT_COMMAND} (pytest-lbr doctor --mount does it)"
)
_INSTANCE_RE = re.compile(rf"^{INSTANCE_PREFIX}-(\d+)-\d+$")
_GROUP_RE = re.compile(rf"^{INSTANCE_PREFIX}_(\d+)_\d+$")


class TracefsError(OSError):
    """A tracefs file refused a write or read; the message names the file."""


def find_tracefs() -> Path | None:
    """The tracefs mount point, or None when it is not mounted (a pure lookup:
    `mount_tracefs()` is the explicit step that mounts it)."""
    for path in TRACEFS_MOUNTS:
        if os.path.exists(os.path.join(path, "trace")):
            return Path(path)
    return None


def mount_tracefs() -> Path:
    """Mount tracefs at /sys/kernel/tracing unless it is mounted there already; that path.

    The set-up step of `pytest-lbr doctor --mount` and of the VM guests, never a
    side effect of a lookup. Raises TracefsError with one line naming the mount
    point and the fix.
    """
    target = TRACEFS_MOUNTS[0]
    if find_tracefs() == Path(target):
        return Path(target)
    if not os.path.isdir(target):
        raise TracefsError(
            errno.ENOENT,
            f"cannot mount tracefs: {target} does not exist (a kernel without "
            "CONFIG_TRACING, or no /sys mounted)",
        )
    mount = libc().mount
    mount.argtypes = [c_char_p, c_char_p, c_char_p, c_ulong, c_void_p]
    mount.restype = c_int
    if mount(b"nodev", target.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        fix = (
            "run as root"
            if err == errno.EPERM
            else "this kernel has no tracefs (CONFIG_TRACING)"
            if err == errno.ENODEV
            else f"mount it as root: {TRACEFS_MOUNT_COMMAND}"
        )
        raise TracefsError(err, f"cannot mount tracefs at {target}: {os.strerror(err)}; {fix}")
    if not os.path.exists(os.path.join(target, "trace")):
        raise TracefsError(errno.ENOENT, f"mounted tracefs at {target} but it has no trace file")
    return Path(target)


def _write(path: Path, value: str, append: bool = False) -> None:
    # os.open: Python's open(..., "a") seeks to the end, which tracefs refuses (EINVAL).
    flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags)
        try:
            # A filter file takes one name per write(2) and says so with a short
            # count (ftrace_regex_write): write the rest until all is taken.
            data = memoryview(value.encode())
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise TracefsError(
            exc.errno, f"writing {value.strip()!r} to {path}: {exc.strerror}"
        ) from None


def _probe_files(root: Path) -> Iterator[tuple[Path, str, str]]:
    """(events file, group, event) for every kprobe/uprobe definition."""
    for name in ("kprobe_events", "uprobe_events"):
        path = root / name
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            m = re.match(r"^[pr]\d*:([^/\s]+)/(\S+)", line)
            if m:
                yield path, m.group(1), m.group(2)


class Instance:
    """One private tracefs instance: configure, arm, disarm, read, remove.

    Created with tracing off; `arm()` is meant to be the last action before the
    traced code and `disarm()` the first after it.
    """

    _counter = 0

    def __init__(self, root: Path, buffer_kb: int = 16384) -> None:
        Instance._counter += 1
        self.root = root
        self.name = f"{INSTANCE_PREFIX}-{os.getpid()}-{Instance._counter}"
        self.group = f"{INSTANCE_PREFIX}_{os.getpid()}_{Instance._counter}"
        self.path = root / "instances" / self.name
        self._events: list[str] = []
        self._probes: list[tuple[str, str]] = []  # (events file name, "group/event")
        self._probe_count = 0
        try:
            os.mkdir(self.path)
        except OSError as exc:
            raise TracefsError(
                exc.errno, f"creating tracefs instance {self.path}: {exc.strerror}"
            ) from None
        self.write("tracing_on", "0")
        self.write("buffer_size_kb", str(buffer_kb))
        # Kept open: opening tracing_on while armed walks the path, and the
        # function tracer records that walk as the traced thread's work. An open
        # file holds the instance (rmdir gives EBUSY), so `close()` closes it first.
        self._on: int | None = os.open(self.path / "tracing_on", os.O_WRONLY)
        #: tracing_cpumask, open from the first `arm()` on (kept open as `_on` is),
        #: and the mask that records on every CPU.
        self._mask: int | None = None
        self._every_cpu = b""
        #: Overruns and drops counted before the last `arm()` (see `lost`).
        self._lost_before = 0
        self._stats = sorted((self.path / "per_cpu").glob("cpu*/stats"))
        #: Their fds, open from the first count on: each arm and each stop counts,
        #: and under emulation an open costs more than the read (closed by `close()`).
        self._stat_fds: list[int] = []

    def write(self, name: str, value: str) -> None:
        """Write `value` to the instance's file `name`."""
        _write(self.path / name, value)

    def read(self, name: str) -> str:
        """The text of the instance's file `name`."""
        return (self.path / name).read_text()

    def enable_event(self, event: str) -> None:
        """Enable `category/name` in this instance only (removed at close)."""
        enable = self.path / "events" / event / "enable"
        if not enable.exists():
            raise TracefsError(errno.ENOENT, f"no trace event {event!r} (no {enable})")
        _write(enable, "1")
        self._events.append(event)

    def add_probe(self, kind: str, definition: str) -> str:
        """Define a kprobe/uprobe event `definition` (without its name) in this
        instance's group, enable it here, return its `group/event` name."""
        self._probe_count += 1  # never reused: a removed event's name may linger
        event = f"{self.group}/e{self._probe_count}"
        file = "kprobe_events" if kind == "kprobe" else "uprobe_events"
        head, _, rest = definition.partition(" ")
        _write(self.root / file, f"{head}:{event} {rest}\n", append=True)
        self._probes.append((file, event))
        self.enable_event(event)
        return event

    def arm(self) -> None:
        """Start recording, into an empty buffer, losses counted from here (`lost`).

        The first arm switches tracing_on to 1. With the function tracer current,
        that calls its start(), `function_trace_start()`, which empties the ring
        buffer and its overrun counters (`tracing_reset_online_cpus()`,
        kernel/trace/trace_functions.c; in 4.4 already, and in 6.1 and 6.12) after an
        RCU grace period, which each arm would wait for. So later arms leave tracing_on at 1 and
        switch the instance's tracing_cpumask from no CPU to every CPU instead
        (`tracing_set_cpumask()`: per-CPU counters, no grace period). The buffer is
        empty then if the last trace was read with `read_pipe`, which consumes it;
        if not, it is emptied first (`clear`, a grace period).
        """
        if self._mask is None:
            self._switch(b"1")
            try:
                self._mask = os.open(self.path / "tracing_cpumask", os.O_RDWR)
                self._every_cpu = os.read(self._mask, 4096).strip()
            except OSError as exc:
                raise TracefsError(exc.errno, f"opening {self.path}/tracing_cpumask") from None
            self._lost_before = 0
            return
        entries, lost = self._counts()
        if entries:
            self.clear()
            lost = 0
        self._lost_before = lost
        self._switch(self._every_cpu, self._mask, "tracing_cpumask")

    def disarm(self) -> None:
        """Stop recording (no CPU in tracing_cpumask, or tracing_on=0 before the
        first arm); idempotent."""
        try:
            if self._mask is not None:
                self._switch(b"0", self._mask, "tracing_cpumask")
            else:
                self._switch(b"0")
        except TracefsError:
            pass

    def _switch(self, value: bytes, fd: int | None = None, name: str = "tracing_on") -> None:
        fd = self._on if fd is None else fd
        if fd is None or self._on is None:
            raise TracefsError(errno.EBADF, f"{self.path}: instance already closed")
        try:
            os.write(fd, value)
        except OSError as exc:
            raise TracefsError(
                exc.errno, f"writing {value.decode()!r} to {self.path}/{name}: {exc.strerror}"
            ) from None

    def set_function_filter(self, names: Iterable[str], listing: str) -> None:
        """Record only the functions called `names` here (`set_ftrace_filter`).

        By name, ftrace compares each name with every traceable function (tens of
        thousands of them), so a long list takes long. By its line number in
        `listing` (available_filter_functions, counted from 1: Linux v5.1, "ftrace:
        Allow enabling of filters via index of available_filter_functions") it is
        found without comparing names. The kernel's own list is read back; where the
        numbers picked other functions, the names are written instead.
        """
        wanted = set(names)
        picked = [
            (str(i), name)
            for i, line in enumerate(listing.splitlines(), 1)
            if (name := line.split(" ", 1)[0]) in wanted
        ]
        if picked:
            try:
                _write(self.path / "set_ftrace_filter", " ".join(i for i, _ in picked))
                if self._filtered() == {name for _, name in picked}:
                    return
            except TracefsError:
                pass
        self.write("set_ftrace_filter", " ".join(sorted(wanted)))

    def _filtered(self) -> set[str]:
        """The names `set_ftrace_filter` holds (its comment line when empty aside)."""
        text = self.read("set_ftrace_filter")
        return {ln.split()[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}

    def skip_functions(self, names: Iterable[str]) -> list[str]:
        """Never record these functions here (`set_ftrace_notrace`); returns
        the names the kernel took (one it cannot trace is left out)."""
        taken = []
        for name in names:
            try:
                _write(self.path / "set_ftrace_notrace", name, append=True)
            except TracefsError:
                continue
            taken.append(name)
        return taken

    def clear(self) -> None:
        """Empty the ring buffer (and its overrun counters): truncating `trace` does that."""
        _write(self.path / "trace", "")

    def set_pids(self, pids: Iterable[int]) -> None:
        """Record only these threads (`set_ftrace_pid`).

        With the function tracer on, a new pid list swaps the tracer's pid-check
        callback only; it does not re-patch the kernel's call sites.
        """
        self.write("set_ftrace_pid", " ".join(str(p) for p in sorted(pids)))

    def set_notrace_pids(self, pids: Iterable[int]) -> None:
        """Never record these threads' functions (`set_ftrace_notrace_pid`; empty: none).

        With the option function-fork on, the threads they start are added too.
        Events are not filtered by it.
        """
        self.write("set_ftrace_notrace_pid", " ".join(str(p) for p in sorted(pids)))

    def unread(self) -> int:
        """Records in the ring buffer not read (consumed) yet, summed over CPUs."""
        return self._counts()[0]

    def _counts(self) -> tuple[int, int]:
        """(records unread, records overwritten or dropped), summed over CPUs."""
        entries = lost = 0
        if len(self._stat_fds) != len(self._stats):
            self._close_stats()
            try:
                for stats in self._stats:  # each kept as opened: closed if a later one fails
                    self._stat_fds.append(os.open(stats, os.O_RDONLY))
            except OSError:
                self._close_stats()
                raise
        for fd in self._stat_fds:
            # Each read at offset 0 makes the text anew (`tracing_stats_read`).
            for line in os.pread(fd, 4096, 0).decode().splitlines():
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "entries":
                    entries += int(value.split()[0])
                elif key in ("overrun", "dropped events"):
                    lost += int(value.split()[0])
        return entries, lost

    def read_pipe(self, limit: int | None = 1 << 23) -> str:
        """The records `trace_pipe` holds now, consumed, as text; never blocks.

        Whole lines only (the kernel hands a record that does not fit in a read
        over at the next one), up to about `limit` bytes (None: all): the rest
        stays in the ring buffer for the next call. Opened and closed per call: an open
        trace_pipe would hold the instance (rmdir gives EBUSY) and its tracer.
        """
        path = self.path / "trace_pipe"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise TracefsError(exc.errno, f"opening {path}: {exc.strerror}") from None
        chunks: list[bytes] = []
        size = 0
        try:
            while limit is None or size < limit:
                try:
                    data = os.read(fd, 1 << 16)  # the kernel gives at most a page per read
                except BlockingIOError:
                    break  # empty
                except OSError as exc:
                    raise TracefsError(exc.errno, f"reading {path}: {exc.strerror}") from None
                if not data:
                    break
                chunks.append(data)
                size += len(data)
        finally:
            os.close(fd)
        return b"".join(chunks).decode(errors="replace")

    def release(self) -> None:
        """Disable the events and remove the probes added so far, keep the instance."""
        for event in self._events:
            try:
                _write(self.path / "events" / event / "enable", "0")
            except TracefsError:
                pass
        for file, event in self._probes:
            _remove_probe(self.root / file, event)
        self._probes.clear()
        self._events.clear()

    def lost(self) -> int:
        """Records the ring buffer overwrote or dropped since the last `arm()`,
        summed over CPUs."""
        return self._counts()[1] - self._lost_before

    def _close_stats(self) -> None:
        fds, self._stat_fds = self._stat_fds, []
        for fd in fds:
            os.close(fd)

    def close(self) -> None:
        """Disarm, disable and delete everything this instance added; idempotent."""
        self._close_stats()
        mask, self._mask = self._mask, None
        if mask is not None:
            os.close(mask)
        on, self._on = self._on, None
        if on is not None:
            try:
                os.write(on, b"0")
            except OSError:
                pass
            os.close(on)
        if not self.path.exists():
            return
        self.release()
        _remove_instance(self.path, ())


def _remove_instance(path: Path, events: Iterable[str]) -> None:
    # Undo in the reverse order of setting up, one kernel change at a time, so
    # rmdir only frees memory and a failing step is attributable. (Under QEMU's
    # multi-threaded TCG with 2 vCPUs the 6.12 guest has died with an int3 Oops at
    # a function's ftrace site, e.g. dequeue_entity+0x1, while the function
    # tracer's ~45,000 sites were being patched: this order does not prevent
    # that; single-threaded TCG, what `pytest-lbr vm` uses, does.)
    for event in events:
        try:
            _write(path / "events" / event / "enable", "0")
        except TracefsError:
            pass
    for name in ("current_tracer", "set_ftrace_pid", "set_event_pid"):
        try:
            # An empty write with O_TRUNC resets a pid list; "nop" ends the tracer.
            _write(path / name, "nop" if name == "current_tracer" else "")
        except TracefsError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


def _remove_probe(file: Path, event: str) -> None:
    try:
        _write(file, f"-:{event}\n", append=True)
    except TracefsError as exc:
        if exc.errno != errno.ENOENT:
            raise


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def cleanup_stale_instances(root: Path | None = None) -> list[str]:
    """Remove instances and probe events left by dead pytest-lbr processes.

    Returns what was removed. An instance's enabled probe events keep the probe
    busy, so every stale instance goes before the stale probe definitions.
    """
    root = root or find_tracefs()
    if root is None or not (root / "instances").is_dir():
        return []
    removed: list[str] = []
    for inst in sorted((root / "instances").iterdir()):
        m = _INSTANCE_RE.match(inst.name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        enabled = [
            str(p.parent.relative_to(inst / "events"))
            for p in (inst / "events").glob("*/*/enable")
            if p.read_text().strip() == "1"
        ]
        _remove_instance(inst, enabled)
        removed.append(inst.name)
    for file, group, event in list(_probe_files(root)):
        m = _GROUP_RE.match(group)
        if m and not _pid_alive(int(m.group(1))):
            _remove_probe(file, f"{group}/{event}")
            removed.append(f"{group}/{event}")
    return removed
