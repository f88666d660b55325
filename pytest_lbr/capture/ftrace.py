"""A private tracefs instance for the graph backend, and the parser of its text.

The graph backend records calls with the ftrace *function* tracer in its own
instance (``instances/pytest_lbr-<pid>-<n>``): the only way to get a call trace
that both Debian kernels here allow without touching the global tracer other
users share (6.1 refuses ``function_graph`` inside an instance). Each function
record reads ``callee+0x4/0x30 <addr> <-parent+0x5d/0xb0 <addr>`` (options
``sym-offset`` and ``sym-addr``), so the parent is a real call-site address,
also inside a JITed BPF program. `reconstruct` turns the records of one thread
into nested call/return steps with a stack.

Everything an `Instance` adds (the instance directory, enabled events, kprobe
and uprobe definitions) is removed by `Instance.close()`; instances left by a
killed process are removed by `cleanup_stale_instances()`.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from ctypes import c_char_p, c_int, c_ulong, c_void_p
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

__all__ = [
    "BPF_SYMBOL_RE",
    "INSTANCE_PREFIX",
    "EventRecord",
    "Frame",
    "FunctionRecord",
    "Instance",
    "Step",
    "TRACEFS_MOUNTS",
    "TRACEFS_MOUNT_COMMAND",
    "TRACEFS_NOT_MOUNTED",
    "TracefsError",
    "cleanup_stale_instances",
    "filter_functions_text",
    "find_tracefs",
    "innermost",
    "innermost_call",
    "matching_functions",
    "mount_tracefs",
    "parse_trace",
    "reconstruct",
]

T = TypeVar("T")

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
#: kallsyms names of JITed BPF functions: bpf_prog_<tag>[_<name>].
BPF_SYMBOL_RE = re.compile(r"^bpf_prog_[0-9a-f]{16}(?:_|$)")
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
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [c_char_p, c_char_p, c_char_p, c_ulong, c_void_p]
    libc.mount.restype = c_int
    if libc.mount(b"nodev", target.encode(), b"tracefs", 0, None) != 0:
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
            os.write(fd, value.encode())
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
        """Start recording (tracing_on=1)."""
        self._switch(b"1")

    def disarm(self) -> None:
        """Stop recording (tracing_on=0); idempotent."""
        try:
            self._switch(b"0")
        except TracefsError:
            pass

    def _switch(self, value: bytes) -> None:
        if self._on is None:
            raise TracefsError(errno.EBADF, f"{self.path}: instance already closed")
        try:
            os.write(self._on, value)
        except OSError as exc:
            raise TracefsError(
                exc.errno, f"writing {value.decode()!r} to {self.path}/tracing_on: {exc.strerror}"
            ) from None

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
        """Records the ring buffer overwrote or dropped, summed over CPUs."""
        total = 0
        for stats in sorted((self.path / "per_cpu").glob("cpu*/stats")):
            for line in stats.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() in ("overrun", "dropped events"):
                    total += int(value.split()[0])
        return total

    def close(self) -> None:
        """Disarm, disable and delete everything this instance added; idempotent."""
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


# -- available_filter_functions ------------------------------------------------------


def _glob_regex(pattern: str) -> str:
    """fnmatch semantics for one function name: `*`, `?`, `[...]`, `[!...]`.

    Every pattern gives a valid regex (a reversed range such as `[z-a]` matches
    nothing, as in fnmatch); a wildcard or class never matches whitespace, so a
    match never runs past the name on its line.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(r"\S*")
        elif c == "?":
            out.append(r"\S")
        elif c == "[":
            start = i + 1 if pattern[i : i + 1] == "!" else i
            if pattern[start : start + 1] == "]":
                start += 1  # "[]...]" and "[!]...]": the first ] is a member
            end = pattern.find("]", start)
            if end < 0:
                out.append(r"\[")
                continue
            body = pattern[i:end]
            i = end + 1
            negate = body.startswith("!")
            out.append(_class_regex(body[1:] if negate else body, negate))
        elif c.isspace():
            out.append("(?!)")  # names hold no whitespace: nothing matches
        else:
            out.append(re.escape(c))
    return "".join(out)


def _class_regex(body: str, negate: bool) -> str:
    """The regex of one `[...]` class body: members and `a-z` ranges, as fnmatch."""
    items: list[str] = []
    k = 0
    while k < len(body):
        lo = body[k]
        if k + 2 < len(body) and body[k + 1] == "-":
            hi = body[k + 2]
            k += 3
            if lo <= hi:  # a reversed range is empty (re would refuse it)
                items.append(f"{_class_char(lo)}-{_class_char(hi)}")
        else:
            items.append(_class_char(lo))
            k += 1
    members = "".join(items)
    if negate:
        return rf"[^\s{members}]"
    return rf"(?!\s)[{members}]" if members else "(?!)"


def _class_char(c: str) -> str:
    # Escaped so that no member acts as a range, negation, set operation or escape.
    return "\\" + c if c in "\\]^-[&~|" else c


_FILTER_FUNCTIONS: dict[str, tuple[bytes, str]] = {}


def filter_functions_text(root: Path | str) -> str:
    """`available_filter_functions` under tracefs `root`, read once per process.

    The kernel builds the text afresh on every read (~50,000 lines: seconds in a
    TCG guest). It changes only when modules come or go, so the copy is reused
    until /proc/modules says otherwise. OSError if it cannot be read.
    """
    key = str(root)
    try:
        with open("/proc/modules", "rb") as f:
            modules = f.read()
    except OSError:
        modules = b""
    cached = _FILTER_FUNCTIONS.get(key)
    if cached is not None and cached[0] == modules:
        return cached[1]
    with open(Path(root) / "available_filter_functions") as f:
        text = f.read()
    _FILTER_FUNCTIONS[key] = (modules, text)
    return text


def matching_functions(text: str, pattern: str, *, modules: bool = True) -> list[str]:
    """Names in `text` (available_filter_functions) matching the glob `pattern`.

    In file order, a name listed twice (static functions of one name) twice.
    One regex over the whole text: ~50,000 lines in milliseconds, where a
    Python loop of fnmatch calls takes seconds in a TCG guest.
    `modules=False` leaves out module functions ("name [module]").
    """
    suffix = r"(?: \[[^\]\n]*\])?" if modules else ""
    # (?=\S): an empty line is no name, even for the pattern "*".
    rx = re.compile(rf"^(?=\S)({_glob_regex(pattern)}){suffix}$", re.MULTILINE)
    return rx.findall(text)


# -- parsing ------------------------------------------------------------------------

# Numbers are ASCII and bounded: int() refuses other digits, and more than 4300 of them.
_LINE_RE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<tid>[0-9]{1,20})\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>[0-9]{1,20})\]\s+"
    r"(?P<flags>\S{4,5})\s+(?P<sec>[0-9]{1,20})\.(?P<usec>[0-9]{1,20}):\s(?P<body>.*)$"
)
_SYM = (
    r"(?P<{0}>\S+?)\+0x(?P<{0}_off>[0-9a-f]+)/0x(?P<{0}_size>[0-9a-f]+)\s+<(?P<{0}_addr>[0-9a-f]+)>"
)
_FUNC_RE = re.compile(rf"^{_SYM.format('fn')}\s+<-{_SYM.format('pa')}$")
# A parent ftrace could not name (e.g. an unnamed JIT image): bare address.
_FUNC_NOSYM_RE = re.compile(
    rf"^{_SYM.format('fn')}\s+<-(?P<pa_addr>0x[0-9a-f]+|[0-9a-f]+)(?:\s+<[0-9a-f]+>)?$"
)


@dataclass(frozen=True)
class FunctionRecord:
    """`callee <- parent` as the function tracer recorded it."""

    tid: int
    cpu: int
    ts_ns: int
    #: True when recorded in hard/soft irq or NMI context (not the thread's own work).
    in_irq: bool
    func: str
    func_addr: int  # function start (the record's ip minus its offset)
    parent: str | None
    parent_off: int
    parent_addr: int  # the return address: the call site's next instruction


@dataclass(frozen=True)
class EventRecord:
    """Any other trace line: a tracepoint or probe event."""

    tid: int
    cpu: int
    ts_ns: int
    name: str
    body: str


def parse_trace(text: str) -> list[FunctionRecord | EventRecord]:
    """Parse the instance's `trace` text (function records and event lines), in order.

    Never raises: a line that is not a record (a comment, garbage, a line cut
    short) is skipped.
    """
    out: list[FunctionRecord | EventRecord] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None:
            continue
        tid, cpu = int(m["tid"]), int(m["cpu"])
        ts = int(m["sec"]) * 1_000_000_000 + int(m["usec"].ljust(9, "0")[:9])
        body = m["body"]
        f = _FUNC_RE.match(body) or _FUNC_NOSYM_RE.match(body)
        if f is None:
            name, _, rest = body.partition(":")
            if " " in name or "(" in name:  # syscall events print "sys_getppid()"
                name, rest = body.split("(", 1)[0], body
            out.append(EventRecord(tid, cpu, ts, name.strip(), rest.strip()))
            continue
        groups = f.groupdict()
        parent = groups.get("pa")
        out.append(
            FunctionRecord(
                tid=tid,
                cpu=cpu,
                ts_ns=ts,
                in_irq=m["flags"][2] not in ".",
                func=f["fn"],
                func_addr=int(f["fn_addr"], 16) - int(f["fn_off"], 16),
                parent=parent,
                parent_off=int(groups["pa_off"], 16) if parent else 0,
                parent_addr=int(f["pa_addr"], 16),
            )
        )
    return out


# -- reconstruction -----------------------------------------------------------------


@dataclass
class Frame:
    """One function on the reconstructed stack."""

    func: str
    addr: int
    #: The call site this frame returns to (None: entered unseen, e.g. a BPF
    #: program the function tracer cannot record, or a frame older than the trace).
    call: FunctionRecord | None = None


@dataclass
class Step:
    """A call into `frame`, a return from it, or an event line.

    `stack` is the stack after a call, before a return, or at an event.
    """

    kind: str  # "call", "ret" or "event"
    frame: Frame | None
    stack: list[Frame] = field(default_factory=list)
    record: FunctionRecord | EventRecord | None = None


def reconstruct(
    records: Iterable[FunctionRecord | EventRecord], returns: dict[str, str] | None = None
) -> Iterator[Step]:
    """Nest one thread's records into calls and returns.

    Each function record is "callee <- parent+off": pop frames until the top is
    the parent, then push the callee. A parent nowhere on the stack was entered
    without a record (a JITed BPF program, a notrace function such as the
    out-of-line copy of a kernel `inline` function, the trace's start), so it
    is pushed as an unseen frame (no call site). Who called it is unknown: it
    goes under a BPF frame if it is BPF code, else under the innermost frame
    known to be still running (`Mentions.running`), never under a frame that
    may have returned (the function tracer records no returns).
    An event named in `returns` (a kretprobe event -> its function) is a real
    return: the innermost frame of that function and all above it are popped.
    Frames still open at the end are returned from, innermost first.
    """
    returns = returns or {}
    records = list(records)
    mentions = Mentions(records, returns)
    stack: list[Frame] = []

    def pop_to(depth: int) -> Iterator[Step]:
        while len(stack) > depth:
            frame = stack.pop()
            yield Step("ret", frame, stack + [frame])

    for index, rec in enumerate(records):
        if isinstance(rec, EventRecord):
            # The event first, while the returning frame is still on the stack.
            yield Step("event", None, list(stack), rec)
            func = returns.get(rec.name)
            depth = innermost_call(stack, func) if func else None
            if depth is not None:
                yield from pop_to(depth)
            continue
        if rec.parent is not None:
            depth = innermost_call(stack, rec.parent)
            if depth is None:
                # A BPF function is called from BPF code: whatever the
                # innermost BPF frame had called has returned.
                bpf = (
                    innermost(stack, lambda f: BPF_SYMBOL_RE.match(f.func))
                    if BPF_SYMBOL_RE.match(rec.parent)
                    else None
                )
                if bpf is None:
                    bpf = mentions.innermost_running(stack, index)
                yield from pop_to(0 if bpf is None else bpf + 1)
                unseen = Frame(rec.parent, rec.parent_addr - rec.parent_off)
                stack.append(unseen)
                yield Step("call", unseen, list(stack))
            else:
                yield from pop_to(depth + 1)
        frame = Frame(rec.func, rec.func_addr, rec)
        stack.append(frame)
        yield Step("call", frame, list(stack), rec)
    yield from pop_to(0)


class Mentions:
    """Where one thread's records name each function: entered, or still running.

    The function tracer records entries only, so whether a frame has returned
    is known only from later records: a function named as a record's parent
    (or by its kretprobe's return event) is still running then, unless a record
    entering it again comes first.
    """

    def __init__(
        self, records: Sequence[FunctionRecord | EventRecord], returns: dict[str, str]
    ) -> None:
        #: function -> (record indexes, whether that record shows it running)
        self._at: dict[str, tuple[list[int], list[bool]]] = {}
        for i, rec in enumerate(records):
            if isinstance(rec, EventRecord):
                if rec.name in returns:
                    self._add(returns[rec.name], i, True)
                continue
            if rec.parent is not None:
                self._add(rec.parent, i, True)  # first: "f <- f" is f still running
            self._add(rec.func, i, False)

    def _add(self, func: str, index: int, running: bool) -> None:
        at = self._at.setdefault(func, ([], []))
        if not at[0] or at[0][-1] != index:
            at[0].append(index)
            at[1].append(running)

    def running(self, func: str, index: int) -> bool:
        """Whether the first record after `index` that names `func` shows it still running."""
        at = self._at.get(func)
        if at is None:
            return False
        k = bisect.bisect_right(at[0], index)
        return k < len(at[0]) and at[1][k]

    def innermost_running(self, stack: Sequence[Frame], index: int) -> int | None:
        """Index of the innermost frame of `stack` known to be running after record `index`."""
        return innermost(stack, lambda f: self.running(f.func, index))


def innermost(stack: Sequence[T], found: Callable[[T], object]) -> int | None:
    """Index of the innermost (last) item of a call stack for which `found` holds."""
    for i in range(len(stack) - 1, -1, -1):
        if found(stack[i]):
            return i
    return None


def innermost_call(stack: Sequence[Frame], func: str) -> int | None:
    """Index of the innermost frame of `func` on a call stack."""
    return innermost(stack, lambda f: f.func == func)
