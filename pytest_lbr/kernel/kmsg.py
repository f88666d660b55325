"""The kernel log: reading its new records from /dev/kmsg, and finding splats in it.

A *splat* is the kernel reporting a bug in itself: a WARN() (`WARNING: CPU: 0 PID: 1
at ...`), a BUG() or an oops, a KASAN or UBSAN report, an RCU stall, a hung task, a
soft lockup. `find_splats` finds them in the kernel log's text, whether it comes from
/dev/kmsg (`4,1234,56789012,-;WARNING: ...`, what `KernelLog.read_new` returns) or
from `dmesg` (`[   56.789012] WARNING: ...`); it is pure, so it is tested on real text.

A splat starts at a line that *begins* with one of the kernel's own report titles
(`WARNING: `, `BUG: `, `Oops`, `general protection fault`, `KASAN: `, `rcu: INFO:
rcu_preempt detected stalls`, ...), not at a line that merely contains one
(`Spectre V2 : WARNING: ...`, `[Firmware Bug]: ...`). Records that user space
wrote into the log (a facility other than the kernel's, seen in /dev/kmsg text) are
never splats.
"""

from __future__ import annotations

import errno
import os
import re
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = [
    "KMSG_PATH",
    "KernelLog",
    "KmsgError",
    "MAX_SPLAT_LINES",
    "Splat",
    "find_splats",
    "is_own_task",
]

KMSG_PATH = "/dev/kmsg"
#: Lines kept of one splat when no end marker closes it sooner.
MAX_SPLAT_LINES = 100
# One record: "prio,seq,usec,flags[,...];text"; prio is (facility << 3) | level.
_RECORD = re.compile(r"^([0-9]{1,10}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;(.*)$")
# dmesg: "[   56.789012] text", with CONFIG_PRINTK_CALLER "[   56.789012][  T123] text".
_DMESG = re.compile(r"^\[ *([0-9]{1,12})\.([0-9]{1,9})\](?:\[ *[TC][0-9]+\])? ?(.*)$")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_TITLE = re.compile(
    r"^(?:"
    r"WARNING: "  # WARN() ("WARNING: CPU: 0 PID: 1 at ..."), lockdep, suspicious RCU usage
    r"|(?:watchdog: )?BUG: "  # NULL dereference, KASAN/KCSAN/KFENCE, sleeping in atomic, soft lockup
    r"|kernel BUG at "
    r"|Oops\b"
    r"|general protection fault"
    r"|Unable to handle kernel "  # arm64's oops
    r"|KASAN: "
    r"|UBSAN: "
    r"|(?:rcu: )?INFO: \S+ (?:self-detected stall|detected (?:expedited )?stalls)"
    r"|INFO: task \S+ blocked for more than "
    r"|watchdog: Watchdog detected hard LOCKUP"
    r")"
)
_CUT_HERE = "------------[ cut here ]------------"
_END_TRACE = "---[ end trace"
# How far before a title its opening line ("cut here", a "=====" banner) may be.
_LOOK_BACK = 6
# How far after the call trace its end marker may be.
_AFTER_STACK = 4
_PID = re.compile(r"\bPID: ([0-9]{1,10})\b|\bCPU#[0-9]+: \S+/([0-9]{1,10})\b")


class KmsgError(OSError):
    """The kernel log cannot be read; the message says why and what to do."""


@dataclass(frozen=True)
class Splat:
    """One kernel bug report: its title line and every line of it, title included."""

    title: str
    lines: tuple[str, ...]
    #: The title record's time stamp (microseconds since boot), when the text had one.
    usec: int | None = None

    @property
    def text(self) -> str:
        """The report as the kernel printed it, one line a line."""
        return "\n".join(self.lines)

    @property
    def message(self) -> str:
        """What a WARN(cond, fmt...) said: the lines between "cut here" and the title."""
        if not self.lines or self.lines[0] != _CUT_HERE:
            return ""
        body = self.lines[1 : self.lines.index(self.title)]
        return " ".join(line.strip() for line in body if line.strip())

    @property
    def summary(self) -> str:
        """One line: the title, and a WARN's message."""
        return f"{self.title} ({self.message})" if self.message else self.title

    @property
    def key(self) -> str:
        """Names this splat in one log: `[   56.789012] title`, as `dmesg` shows it."""
        if self.usec is None:
            return self.title
        return f"[{self.usec // 1_000_000:5d}.{self.usec % 1_000_000:06d}] {self.title}"

    @property
    def pid(self) -> int | None:
        """The task the kernel was running for when it complained, when the report says."""
        for line in self.lines:
            match = _PID.search(line)
            if match:
                return int(match.group(1) or match.group(2))
        return None


def _unescape(text: str) -> str:
    # /dev/kmsg writes bytes < 0x20, >= 0x7f and the backslash as \xNN.
    if "\\x" not in text:
        return text
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def _messages(lines: Iterable[str]) -> Iterator[tuple[str, int | None]]:
    """(text, usec) for each line of kernel messages, prefixes and user records dropped."""
    in_record = False
    for raw in lines:
        raw = raw.rstrip("\n")
        record = _RECORD.match(raw)
        if record:
            in_record = True
            if int(record.group(1)) >> 3:  # facility: written by user space, not the kernel
                continue
            usec = int(record.group(3))
            for part in _unescape(record.group(4)).split("\n"):
                yield part, usec
            continue
        if in_record and raw.startswith(" "):
            continue  # the record's dictionary ("SUBSYSTEM=...")
        in_record = False
        stamped = _DMESG.match(raw)
        if stamped:
            seconds, fraction, text = stamped.groups()
            yield text, int(seconds) * 1_000_000 + int(fraction[:6].ljust(6, "0"))
        else:
            yield raw, None


def _opener(line: str) -> bool:
    return line == _CUT_HERE or (len(line) >= 20 and set(line) == {"="})


def find_splats(lines: Iterable[str]) -> list[Splat]:
    """The splats in kernel log text (/dev/kmsg records or `dmesg` lines), in order.

    A splat runs from its opening line (a WARN's "cut here", a KASAN banner), or its
    title, to the end of its report: "---[ end trace ...]---", the closing banner,
    the end of the call trace (" </TASK>"), or MAX_SPLAT_LINES lines.
    """
    messages = list(_messages(lines))
    texts = [text for text, _ in messages]
    splats: list[Splat] = []
    i, done = 0, 0  # done: lines already in a splat
    while i < len(texts):
        if not _TITLE.match(texts[i]):
            i += 1
            continue
        start = i
        for j in range(i - 1, max(done, i - _LOOK_BACK) - 1, -1):
            if _opener(texts[j]):
                start = j
                break
        banner = texts[start] != _CUT_HERE and _opener(texts[start])
        end = _report_end(texts, start, i, banner)
        splats.append(Splat(texts[i], tuple(texts[start:end]), messages[i][1]))
        i = done = end
    return splats


def _report_end(texts: list[str], start: int, title: int, banner: bool) -> int:
    """The index after the last line of the report that starts at `start`."""
    limit = min(len(texts), start + MAX_SPLAT_LINES)
    if banner:  # KASAN, UBSAN, KCSAN close their banner; lockdep does not
        for j in range(title + 1, limit):
            if _opener(texts[j]):
                return j + 1
    stack_end = None
    for j in range(title + 1, limit):
        if texts[j].startswith(_END_TRACE):
            return j + 1
        if stack_end is None and texts[j].strip() == "</TASK>":
            stack_end = j + 1
        if stack_end is not None and j >= stack_end + _AFTER_STACK:
            break  # an oops prints its modules and end marker after the stack; a dump_stack() nothing
    return stack_end if stack_end is not None else limit


def is_own_task(pid: int) -> bool:
    """Is kernel task `pid` a thread of this process, or of a live process it started?"""
    if os.path.exists(f"/proc/self/task/{pid}"):
        return True
    me = os.getpid()
    for _ in range(64):  # a bounded walk up the parents
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False  # gone (or never was): nobody can tell whose it was
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == me:
            return True
        if ppid <= 1:
            return False
        pid = ppid
    return False


class KernelLog:
    """The records the kernel logs from now on (/dev/kmsg, read without blocking).

    `read_new()` returns what was logged since the last call (or since opening). If
    the kernel overwrote records before they were read, `missed` counts the times.
    """

    def __init__(self, path: str = KMSG_PATH) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            fix = (
                ": run as root (reading the kernel log needs CAP_SYSLOG when "
                "kernel.dmesg_restrict=1)"
                if exc.errno in (errno.EPERM, errno.EACCES)
                else ""
            )
            raise KmsgError(
                exc.errno, f"cannot read the kernel log ({path}): {exc.strerror}{fix}"
            ) from None
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)
        os.lseek(fd, 0, os.SEEK_END)  # only records from now on
        self.missed = 0

    def read_new(self) -> list[str]:
        """The records logged since the last call, as text lines (a record's
        dictionary lines, which start with a space, follow it)."""
        lines: list[str] = []
        while True:
            try:
                chunk = os.read(self._fd, 16384)
            except BlockingIOError:
                return lines
            except BrokenPipeError:  # overwritten before read: the next read goes on after them
                self.missed += 1
                continue
            if not chunk:
                return lines
            lines.extend(chunk.decode("utf-8", "replace").splitlines())

    def close(self) -> None:
        """Close the log (idempotent)."""
        self._finalizer()

    def __enter__(self) -> KernelLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
