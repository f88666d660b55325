"""What proves a conformance program ran, from the program's own output: its ring
buffer's records, the lines its bpf_printk wrote to the kernel's trace buffer, a
.bss variable it counts in; and a table of the helper calls a trace saw.
"""

from __future__ import annotations

import ctypes
import errno
import re
from collections.abc import Iterable
from ctypes import CFUNCTYPE, c_int, c_size_t, c_void_p
from dataclasses import dataclass

from pytest_lbr.bpf import BpfObject, Map
from pytest_lbr.kernel.tracefs import find_tracefs
from pytest_lbr.libbpf import BpfError, check_int, lib
from pytest_lbr.model import Trace

_SAMPLE = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)


def ring_buffer_records(ring: Map) -> list[bytes]:
    """Every record waiting in a BPF_MAP_TYPE_RINGBUF map, consumed, oldest first."""
    records: list[bytes] = []

    def sample(_ctx: int | None, data: int | None, size: int) -> int:
        records.append(ctypes.string_at(data, size) if data else b"")
        return 0

    callback = _SAMPLE(sample)  # referenced until ring_buffer__free
    rb = lib.ring_buffer__new(ring.fd, callback, None, None)
    if not rb:
        raise BpfError(ctypes.get_errno() or errno.EINVAL, f"ring_buffer__new of map {ring.name}")
    try:
        while check_int(lib.ring_buffer__consume(rb), f"ring_buffer__consume of {ring.name}") > 0:
            pass
    finally:
        lib.ring_buffer__free(rb)
    return records


@dataclass(frozen=True)
class PrintkLine:
    """One bpf_printk line of the kernel's trace buffer: who wrote it, and what."""

    comm: str
    tid: int
    message: str


# "            true-1234    [000] d..31   123.456789: bpf_trace_printk: exec /bin/true"
# (with the record-tgid option, a "( 1234)" column follows the task).
_PRINTK_RE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<tid>\d+)\s+(?:\(\s*[\d-]+\)\s+)?\[\d+\]\s.*?"
    r"bpf_trace_printk: (?P<message>.*)$"
)


def printk_lines() -> list[PrintkLine]:
    """The bpf_printk lines in the kernel's top-level trace buffer (read, not consumed:
    the file `trace`, where bpf_trace_printk and bpf_trace_vprintk write)."""
    root = find_tracefs()
    assert root is not None, "tracefs is not mounted: no trace buffer to read bpf_printk from"
    text = (root / "trace").read_text(errors="replace")
    out = []
    for line in text.splitlines():
        m = _PRINTK_RE.match(line)
        if m:
            out.append(PrintkLine(m["comm"], int(m["tid"]), m["message"]))
    return out


def section_map(obj: BpfObject, section: str) -> Map:
    """The map libbpf made for a global-data section (".bss", ".data", ".rodata") of `obj`:
    libbpf names it by a prefix of the object's name and the section (`ksyscall.bss`)."""
    (found,) = [m for name, m in obj.maps.items() if name.endswith(section)]
    return found


def called_table(trace: Trace, by: str, names: Iterable[str]) -> str:
    """One line per helper name: whether `trace.called(name, by=by)` (printed by the
    tests before their asserts, so a failure shows every name, not only the first)."""
    rows = []
    for name in names:
        seen = "called" if trace.called(name, by=by) else "NOT SEEN"
        rows.append(f"  {name:<28} {seen}")
    return f"trace.called(NAME, by={by!r}):\n" + "\n".join(rows)
