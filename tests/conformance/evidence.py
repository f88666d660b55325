"""What proves a conformance program ran, from the program's own output: its ring
buffer's records, its perf event array's records, the lines its bpf_printk wrote to
the kernel's trace buffer, the global variables it counts in (read, and set before a
run, by name); and a table of the helper calls a trace saw.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import re
from collections.abc import Iterable
from ctypes import CFUNCTYPE, c_int, c_size_t, c_void_p
from dataclasses import dataclass
from pathlib import Path

from pytest_lbr.bpf import BpfObject, Map
from pytest_lbr.bpf.libbpf import BpfError, check_int, lib
from pytest_lbr.kernel.tracefs import find_tracefs
from pytest_lbr.model import UNSEEN_CALLER, Trace

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


def assert_called(trace: Trace, by: str, names: Iterable[str]) -> None:
    """Program `by` ran in `trace` and called each of `names`, as its C source names
    them (helpers, kfuncs, libbpf macros). The whole `called_table` is printed first,
    so a failure shows every name, not only the first.

    A trace that has no branches by design (the lbr backend on software perf events:
    `Trace.no_branches` says why) cannot tell calls, and does not pretend to: then
    only the program's hits are asserted.
    """
    text = trace.edges()
    hits = [h for h in trace.hits if h.target.rsplit(":", 1)[-1] == by]
    assert hits, (by, text)
    if trace.no_branches:
        print(f"trace.called(NAME, by={by!r}): cannot tell: {trace.no_branches}")
        return
    names = tuple(names)
    print(called_table(trace, by, names))
    missing = [name for name in names if not trace.called(name, by=by)]
    assert not missing, (by, missing, text)


def assert_call_lines(
    trace: Trace, by: str, name: str, source: Path, *, merged: bool = False
) -> None:
    """Each call program `by` made of `name` (as its C source names it) is shown at a
    line of `source` that names it: the call's own line, not the next statement's.
    `merged`: the compiler made one call instruction of the calls on several lines
    (two `bpf_printk`s on two paths), and gave it line 0, no one line: that is shown."""
    if trace.no_branches:
        return
    lines = source.read_text().splitlines()
    allowed = {n for n, text in enumerate(lines, 1) if name in text} | ({0} if merged else set())
    shown = {
        b.src.line
        for b in trace.calls()
        if b.dst.matches(name)
        and b.src.symbol
        and (b.src.symbol == by or b.src.symbol.endswith(f"_{by}"))
    }
    assert shown, (by, name, str(trace))
    assert shown <= allowed, (f"{name} shown at lines {shown}", sorted(allowed))


def lost_program_calls(trace: Trace) -> list[str]:
    """The trace's lines that lose a program's own call: a function the program's
    code calls, entered from an unseen caller. (Deeper in the kernel, a call three
    or more notrace functions down can still have an unseen caller: 6.12's
    bpf_selem_alloc reaching irq_work_queue; the trace says so, and that loses no
    call of the program.)"""
    lost = []
    for hit in trace.hits:
        called = {
            c.function
            for b in hit.branches
            for loc in (b.src, b.dst)
            if loc.program is not None
            for c in loc.program.calls
            if c.function
        }
        lost += [
            str(b)
            for b in hit.branches
            if b.kind == "unseen" and b.src == UNSEEN_CALLER and b.dst.symbol in called
        ]
    return lost


def global_vars(obj: BpfObject, section: str = ".bss") -> dict[str, bytes]:
    """Every global variable of a global-data section (".bss", ".data") of `obj` by its
    C name, as the kernel holds it now: the section map's value cut where the object's
    ELF symbol table puts each variable (what a skeleton's `skel->bss->name` reads)."""
    value = section_map(obj, section)[0]
    return {name: value[offset : offset + size] for name, (offset, size) in _symbols(obj, section)}


def set_global(obj: BpfObject, name: str, value: int | bytes) -> None:
    """Write one global variable of `obj`'s .bss (`skel->bss->name = value`): an int
    is packed little-endian to the variable's size; the others keep their values."""
    where = dict(_symbols(obj, ".bss"))
    assert name in where, f"no .bss variable {name!r} in {obj.path.name}: it has {sorted(where)}"
    offset, size = where[name]
    raw = value.to_bytes(size, "little", signed=value < 0) if isinstance(value, int) else value
    assert len(raw) == size, (name, size, raw)
    bss = section_map(obj, ".bss")
    old = bss[0]
    bss.update(0, old[:offset] + raw + old[offset + size :])


def _symbols(obj: BpfObject, section: str) -> list[tuple[str, tuple[int, int]]]:
    """(name, (offset, size)) of the variables the object file defines in `section`."""
    from elftools.elf.elffile import ELFFile

    with obj.path.open("rb") as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == section)
        symtab = elf.get_section_by_name(".symtab")
        return [
            (sym.name, (sym["st_value"], sym["st_size"]))
            for sym in symtab.iter_symbols()
            if sym["st_info"]["type"] == "STT_OBJECT" and sym["st_shndx"] == index
        ]


_PERF_SAMPLE = CFUNCTYPE(None, c_void_p, c_int, c_void_p, ctypes.c_uint32)
_PERF_LOST = CFUNCTYPE(None, c_void_p, c_int, ctypes.c_uint64)


class PerfBuffer:
    """The records a program sends with bpf_perf_event_output to a
    BPF_MAP_TYPE_PERF_EVENT_ARRAY map, through libbpf's perf_buffer (one perf event
    per CPU, opened when this is made: open it before the work, read it after).

        with PerfBuffer(obj.maps["events"]) as events:
            ...work...
        events.records  # bytes of each record, in the order consumed; events.lost
    """

    def __init__(self, events: Map, pages: int = 8) -> None:
        self.records: list[bytes] = []
        self.lost = 0
        self._sample = _PERF_SAMPLE(self._on_sample)  # referenced until perf_buffer__free
        self._lost = _PERF_LOST(self._on_lost)
        self._lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
        self._lib.perf_buffer__new.restype = c_void_p
        self._lib.perf_buffer__new.argtypes = [
            c_int,
            c_size_t,
            _PERF_SAMPLE,
            _PERF_LOST,
            c_void_p,
            c_void_p,
        ]
        self._lib.perf_buffer__consume.argtypes = [c_void_p]
        self._lib.perf_buffer__free.argtypes = [c_void_p]
        self._lib.perf_buffer__free.restype = None
        self._pb = self._lib.perf_buffer__new(
            events.fd, pages, self._sample, self._lost, None, None
        )
        if not self._pb:
            err = ctypes.get_errno() or errno.EINVAL
            raise BpfError(err, f"perf_buffer__new of map {events.name}")
        self._name = events.name

    def _on_sample(self, _ctx: int | None, _cpu: int, data: int | None, size: int) -> None:
        self.records.append(ctypes.string_at(data, size) if data else b"")

    def _on_lost(self, _ctx: int | None, _cpu: int, count: int) -> None:
        self.lost += count

    def consume(self) -> list[bytes]:
        """Read every record waiting on every CPU; all records read so far."""
        if self._pb:
            check_int(
                self._lib.perf_buffer__consume(self._pb), f"perf_buffer__consume of {self._name}"
            )
        return self.records

    def close(self) -> None:
        """Read what is left, then close the perf events (idempotent)."""
        if self._pb:
            self.consume()
            self._lib.perf_buffer__free(self._pb)
            self._pb = None

    def __enter__(self) -> PerfBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
