"""The function tracer's text, as records: what `parse_trace` reads from a tracefs
instance's ``trace`` file (`pytest_lbr.kernel.tracefs`).

Each function record reads ``callee+0x4/0x30 <addr> <-parent+0x5d/0xb0 <addr>``
(options ``sym-offset`` and ``sym-addr``), so the parent is a real call-site
address, also inside a JITed BPF program. Any other line is an event. On arm64 a
function with a kretprobe on it has no parent in its record; its kretprobe event
gives it one.

Parsing bounds how much a live ``--all`` trace can read, so it is done in bulk:
one compiled pass over the whole text splits each line into its header fields
and body, a function record's body is parsed once per distinct text (a call
site: the same ones come back trace after trace) and records are tuples. Lines
that pass is not sure of (events, kretprobe'd or unnamed parents, anything odd)
take the general path, line by line, which gives the same records.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["EventRecord", "FunctionRecord", "parse_trace"]

# -- the general path: one line at a time ------------------------------------------

# Numbers are ASCII and bounded: int() refuses other digits, and more than 4300 of them.
_LINE_RE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<tid>[0-9]{1,20})\s+(?:\(\s*(?P<tgid>[-\d]{1,20})\)\s+)?\[(?P<cpu>[0-9]{1,20})\]\s+"
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
# A function under a kretprobe on arm64: the kprobe (a breakpoint there, no
# KPROBES_ON_FTRACE) swaps the link register for its trampoline before the
# function tracer reads it, so the parent is "[unknown/kretprobe'd]". The
# kretprobe's own event names the real call site when the function returns.
_FUNC_KRETPROBED_RE = re.compile(
    rf"^{_SYM.format('fn')}\s+<-\[unknown/kretprobe'd\](?:\s+<[0-9a-f]+>)?$"
)
# A kretprobe event's body: "(caller+0x108/0x3e0 <addr> <- func <addr>) ret=0x0".
_RETURN_RE = re.compile(
    r"^\((?P<pa>\S+?)\+0x(?P<pa_off>[0-9a-f]+)/0x[0-9a-f]+\s+<(?P<pa_addr>[0-9a-f]+)>"
    r"\s+<-\s+(?P<fn>\S+)\s"
)

# -- the fast path: the whole text in one pass ---------------------------------------
#
# It reads each line it takes exactly as the general path would: on text whose
# only whitespace is " " and "\n" (what ftrace prints), its patterns are the
# general path's with \s as " ", and str.splitlines() splits at "\n" alone.
# A line holding any other whitespace or line break takes the general path.
_ODD_CHARS = "\t\r\x0b\x0c\x1c\x1d\x1e\x1f"  # ASCII \s and line breaks but " " and "\n"
_ODD_RE = re.compile(r"[\t\r\x0b\x0c\x1c-\x1f]|[^\x00-\x7f]")
# _LINE_RE's header, atomic: the general path's body (.*$) takes any rest of the
# line, so its header is the first this pattern finds, and so is ours. Lines
# it does not find (comments, garbage) the general path skips too. The header's
# fields up to the flags are one group, read by _HEAD_RE once per distinct text
# (a thread on a CPU in a context): capturing them here is the same match.
_TEXT_RE = re.compile(
    r"^(?!#)(?>( *.*?-[0-9]{1,20} +(?:\( *[-\d]{1,20}\) +)?\[[0-9]{1,20}\] +\S{4,5})"
    r" +([0-9]{1,20})\.([0-9]{1,20}): )(.*)",
    re.MULTILINE,
)
_HEAD_RE = re.compile(
    r" *(.*?)-([0-9]{1,20}) +(?:\( *([-\d]{1,20})\) +)?\[([0-9]{1,20})\] +(\S{4,5})"
)
# _FUNC_RE, quicker, for the usual body: names without "+" (its lazy names stop
# at the first "+0x" that lets the rest match, and such a name ends there) and
# blanks that are " ". What it matches, _FUNC_RE reads the same.
_FAST_FUNC_RE = re.compile(
    r"([^\s+]+)\+0x([0-9a-f]+)/0x[0-9a-f]+ +<([0-9a-f]+)> +<-([^\s+]+)\+0x([0-9a-f]+)/0x[0-9a-f]+ +<([0-9a-f]+)>"
)
#: The trace clock's fraction of a second, n digits -> its factor to ns (_ts_ns).
_SCALE = tuple(10 ** (9 - min(n, 9)) for n in range(21))
#: Distinct function-record bodies kept parsed (a body is a call site: the same
#: ones come back trace after trace, poll after poll); emptied when full. About
#: 0.5 KB each: this bounds what the cache holds at ~2 MB.
BODY_CACHE_SIZE = 1 << 12


class FunctionRecord(NamedTuple):
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
    #: The thread's process (option record-tgid; 0 where ftrace did not know it).
    tgid: int = 0
    comm: str = ""


class EventRecord(NamedTuple):
    """Any other trace line: a tracepoint or probe event."""

    tid: int
    cpu: int
    ts_ns: int
    name: str
    body: str
    tgid: int = 0
    comm: str = ""


#: What a line's body says when that depends on the body alone (`_read_body`): a
#: function record's (func, func_addr, parent, parent_off, parent_addr), an
#: event's (name, body), or a kretprobe event's (name, body, True): that one may
#: name the parent of a kretprobe'd function's record before it.
_Body = tuple[str, int, str | None, int, int] | tuple[str, str] | tuple[str, str, bool]
_Records = list[FunctionRecord | EventRecord]
#: (tid, function) -> indexes in the records of its kretprobe'd records, newest last.
_Unknown = dict[tuple[int, str], list[int]]


class _Bodies(dict[str, "_Body | None"]):
    """Line bodies read once (`_read_body`). Bounded: emptied when full."""

    def __missing__(self, body: str) -> _Body | None:
        if len(self) >= BODY_CACHE_SIZE:
            self.clear()
        self[body] = parsed = _read_body(body)
        return parsed


class _Heads(dict[str, tuple[int, int, str, int, str]]):
    """A line header's (tid, cpu, flags, tgid, comm), read once per text (`_HEAD_RE`)."""

    def __missing__(self, head: str) -> tuple[int, int, str, int, str]:
        m = _HEAD_RE.fullmatch(head)
        assert m is not None  # _TEXT_RE matched it
        comm, tid, tgid, cpu, flags = m.groups()
        self[head] = value = (int(tid), int(cpu), flags, _tgid(tgid), comm)
        return value


_bodies = _Bodies()


def parse_trace(text: str) -> list[FunctionRecord | EventRecord]:
    """Parse the instance's `trace` text (function records and event lines), in order.

    Never raises: a line that is not a record (a comment, garbage, a line cut
    short) is skipped.
    """
    out: _Records = []
    unknown: _Unknown = {}
    if text.isascii() and not any(c in text for c in _ODD_CHARS):
        _parse_plain(text, out, unknown)
        return out
    pos = 0
    while (odd := _ODD_RE.search(text, pos)) is not None:
        start = text.rfind("\n", pos, odd.start()) + 1
        end = text.find("\n", odd.end())
        end = len(text) if end < 0 else end
        _parse_plain(text[pos:start], out, unknown)
        _parse_lines(text[start:end], out, unknown)
        pos = end
    _parse_plain(text[pos:], out, unknown)
    return out


def _parse_plain(text: str, out: _Records, unknown: _Unknown) -> None:
    """The fast path: add the records of `text`, whose only whitespace is " " and "\n"."""
    bodies, heads, scale = _bodies, _Heads(), _SCALE
    new = tuple.__new__  # a record without NamedTuple.__new__'s Python call
    for head, sec, usec, body in _TEXT_RE.findall(text):
        tid, cpu, flags, tgid, comm = heads[head]
        parsed = bodies[body]
        if parsed is not None and len(parsed) == 5:
            ts = int(sec + usec[:9]) * scale[len(usec)]  # _ts_ns, inline
            out.append(new(FunctionRecord, (tid, cpu, ts, flags[2] != ".", *parsed, tgid, comm)))
        elif parsed is not None and (len(parsed) == 2 or not unknown):
            # An event; a return event with no kretprobe'd record waiting names no parent.
            ts = int(sec + usec[:9]) * scale[len(usec)]
            out.append(new(EventRecord, (tid, cpu, ts, parsed[0], parsed[1], tgid, comm)))
        else:  # a kretprobe'd function's record, or a return event that may name its parent
            _add_special(tid, cpu, _ts_ns(sec, usec), flags, tgid, comm, body, out, unknown)


def _ts_ns(sec: str, usec: str) -> int:
    """The trace clock in ns: seconds and the first 9 digits of the fraction."""
    return int(sec) * 1_000_000_000 + int(usec.ljust(9, "0")[:9])


def _tgid(tgid: str | None) -> int:
    return int(tgid) if tgid and tgid.isdigit() else 0


def _parse_lines(text: str, out: _Records, unknown: _Unknown) -> None:
    """The general path: add the records of the lines of `text`, one at a time."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None:
            continue
        tid, cpu, ts = int(m["tid"]), int(m["cpu"]), _ts_ns(m["sec"], m["usec"])
        tgid, flags, comm, body = _tgid(m["tgid"]), m["flags"], m["comm"], m["body"]
        parsed = _read_body(body)
        if parsed is None or len(parsed) == 3:
            _add_special(tid, cpu, ts, flags, tgid, comm, body, out, unknown)
        elif len(parsed) == 5:
            out.append(FunctionRecord(tid, cpu, ts, flags[2] not in ".", *parsed, tgid, comm))
        else:
            out.append(EventRecord(tid, cpu, ts, parsed[0], parsed[1], tgid, comm))


def _read_body(body: str) -> _Body | None:
    """What a line's body says, or None where that depends on the lines around it
    (a kretprobe'd function's record, whose parent a later kretprobe event names)."""
    fast = _FAST_FUNC_RE.fullmatch(body)
    if fast is None:
        return _read_any_body(body)
    fn, fn_off, fn_addr, pa, pa_off, pa_addr = fast.groups()
    return (fn, int(fn_addr, 16) - int(fn_off, 16), pa, int(pa_off, 16), int(pa_addr, 16))


def _read_any_body(body: str) -> _Body | None:
    """`_read_body` without the quick way."""
    f = _FUNC_RE.match(body) or _FUNC_NOSYM_RE.match(body)
    if f is not None:
        groups = f.groupdict()
        parent = groups.get("pa")
        return (
            f["fn"],
            int(f["fn_addr"], 16) - int(f["fn_off"], 16),
            parent,
            int(groups["pa_off"], 16) if parent else 0,
            int(groups.get("pa_addr") or "0", 16),
        )
    if _FUNC_KRETPROBED_RE.match(body):
        return None
    name, rest = _event(body)
    return (name, rest, True) if _RETURN_RE.match(rest) else (name, rest)


def _event(body: str) -> tuple[str, str]:
    """An event line's (name, body)."""
    name, _, rest = body.partition(":")
    if " " in name or "(" in name:  # syscall events print "sys_getppid()"
        name, rest = body.split("(", 1)[0], body
    return name.strip(), rest.strip()


def _add_special(
    tid: int,
    cpu: int,
    ts: int,
    flags: str,
    tgid: int,
    comm: str,
    body: str,
    out: _Records,
    unknown: _Unknown,
) -> None:
    """Add a record `_read_body` cannot make alone: a kretprobe'd function's, whose
    parent its kretprobe event gives later, or such an event."""
    if (f := _FUNC_KRETPROBED_RE.match(body)) is not None:
        unknown.setdefault((tid, f["fn"]), []).append(len(out))
        func_addr = int(f["fn_addr"], 16) - int(f["fn_off"], 16)
        out.append(
            FunctionRecord(
                tid, cpu, ts, flags[2] not in ".", f["fn"], func_addr, None, 0, 0, tgid, comm
            )
        )
        return
    name, rest = _event(body)
    out.append(EventRecord(tid, cpu, ts, name, rest, tgid, comm))
    ret = _RETURN_RE.match(rest)
    if ret is not None and unknown.get((tid, ret["fn"])):
        i = unknown[(tid, ret["fn"])].pop()  # the innermost call returns first
        called = out[i]
        assert isinstance(called, FunctionRecord)
        out[i] = called._replace(
            parent=ret["pa"],
            parent_off=int(ret["pa_off"], 16),
            parent_addr=int(ret["pa_addr"], 16),
        )
