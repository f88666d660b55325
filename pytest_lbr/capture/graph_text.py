"""The function tracer's text, as records: what `parse_trace` reads from a tracefs
instance's ``trace`` file (`pytest_lbr.kernel.tracefs`).

Each function record reads ``callee+0x4/0x30 <addr> <-parent+0x5d/0xb0 <addr>``
(options ``sym-offset`` and ``sym-addr``), so the parent is a real call-site
address, also inside a JITed BPF program. Any other line is an event. On arm64 a
function with a kretprobe on it has no parent in its record; its kretprobe event
gives it one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["EventRecord", "FunctionRecord", "parse_trace"]

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
    #: The thread's process (option record-tgid; 0 where ftrace did not know it).
    tgid: int = 0
    comm: str = ""


@dataclass(frozen=True)
class EventRecord:
    """Any other trace line: a tracepoint or probe event."""

    tid: int
    cpu: int
    ts_ns: int
    name: str
    body: str
    tgid: int = 0
    comm: str = ""


def parse_trace(text: str) -> list[FunctionRecord | EventRecord]:
    """Parse the instance's `trace` text (function records and event lines), in order.

    Never raises: a line that is not a record (a comment, garbage, a line cut
    short) is skipped.
    """
    out: list[FunctionRecord | EventRecord] = []
    #: (tid, function) -> indexes in `out` of its kretprobe'd records, newest last.
    unknown_parent: dict[tuple[int, str], list[int]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None:
            continue
        tid, cpu = int(m["tid"]), int(m["cpu"])
        tgid = int(m["tgid"]) if m["tgid"] and m["tgid"].isdigit() else 0
        comm = m["comm"]
        ts = int(m["sec"]) * 1_000_000_000 + int(m["usec"].ljust(9, "0")[:9])
        body = m["body"]
        f = _FUNC_RE.match(body) or _FUNC_NOSYM_RE.match(body)
        if f is None and (f := _FUNC_KRETPROBED_RE.match(body)) is not None:
            unknown_parent.setdefault((tid, f["fn"]), []).append(len(out))
        if f is None:
            name, _, rest = body.partition(":")
            if " " in name or "(" in name:  # syscall events print "sys_getppid()"
                name, rest = body.split("(", 1)[0], body
            out.append(EventRecord(tid, cpu, ts, name.strip(), rest.strip(), tgid, comm))
            ret = _RETURN_RE.match(rest.strip())
            if ret is not None and unknown_parent.get((tid, ret["fn"])):
                i = unknown_parent[(tid, ret["fn"])].pop()  # the innermost call returns first
                called = out[i]
                assert isinstance(called, FunctionRecord)
                out[i] = replace(
                    called,
                    parent=ret["pa"],
                    parent_off=int(ret["pa_off"], 16),
                    parent_addr=int(ret["pa_addr"], 16),
                )
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
                parent_addr=int(groups.get("pa_addr") or "0", 16),
                tgid=tgid,
                comm=comm,
            )
        )
    return out
