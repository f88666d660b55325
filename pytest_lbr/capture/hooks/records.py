"""The LBR tracer's records: ctypes mirrors of its structs, and decoding a ring buffer record.

The layout constants come from the loaded object's BTF (`tracer_object.tracer_layout`);
the mirrors here are checked against that BTF member by member (tests/test_lbr_decode.py).
"""

from __future__ import annotations

import ctypes
import functools
from ctypes import Structure, c_char, c_int32, c_int64, c_uint32, c_uint64
from dataclasses import dataclass, field
from typing import Any

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.tracer_object import TracerLayout, tracer_layout

__all__ = ["ConfigRecord", "RawHit", "decode_record", "hit_record_type"]


class _Entry(Structure):
    _fields_ = [("from_", c_uint64), ("to", c_uint64), ("flags", c_uint64)]


class ConfigRecord(Structure):
    """ctypes mirror of `struct lbr_config` (the object's .rodata, set before load)."""

    _fields_ = [
        ("tgid", c_uint32),
        ("target", c_uint32),
        ("snapshot", c_uint32),
        ("function", c_uint32),
        ("scope", c_uint32),
        ("keep_irq", c_uint32),
        ("skip_tgid", c_uint32),
        ("sym_preempt_count", c_uint64),
        ("sym_per_cpu_offset", c_uint64),
        ("task_tgid", c_uint32),
        ("task_preempt_count", c_uint32),
    ]


def _hit_fields(max_entries: int) -> list[tuple[str, Any]]:
    return [
        ("type", c_uint32),
        ("hook", c_uint32),
        ("cookie", c_uint64),
        ("func_ip", c_uint64),
        ("ts_ns", c_uint64),
        ("retval", c_int64),
        ("cpu", c_uint32),
        ("pid", c_uint32),
        ("tid", c_uint32),
        ("snapshot_ret", c_int32),
        ("nr_entries", c_uint32),
        ("flags", c_uint32),
        ("comm", c_char * 16),
        ("entries", _Entry * max_entries),
    ]


@functools.cache
def hit_record_type(max_entries: int) -> type[Structure]:
    """ctypes mirror of `struct lbr_hit` holding `max_entries` branch entries.

    Built on first use from the loaded object's layout (a test checks it
    against the object's BTF member by member).
    """
    return type("LbrHitRecord", (Structure,), {"_fields_": _hit_fields(max_entries)})


@dataclass
class RawHit:
    """One record from the tracer, before decoding and symbolization."""

    target: int
    cpu: int
    pid: int
    tid: int
    ts_ns: int
    retval: int | None
    snapshot_ret: int
    #: Branch records newest first, as the CPU delivered them: (from, to, flags).
    entries: list[tuple[int, int, int]] = field(default_factory=list)
    #: Index of the function within a glob target (0 otherwise).
    function: int = 0
    #: Address of the traced function where the hook knows it (0 otherwise).
    func_ip: int = 0
    hook: int = 0
    #: The task's command name at the hit (of the interrupted task in interrupt context).
    comm: str = ""
    #: The hook ran in hardirq, NMI or softirq context.
    in_interrupt: bool = False


def decode_record(data: bytes, layout: TracerLayout | None = None) -> RawHit:
    """One ring buffer record as a RawHit (the layout of the object that sent it).

    The tracer reserves whole `struct lbr_hit`s, so a record of any other size
    was not sent by that object: CaptureError (one line), never a guess.
    """
    layout = layout or tracer_layout()
    record = hit_record_type(layout.max_entries)
    size = ctypes.sizeof(record)
    if len(data) != size:
        # Zero-padding a short record would invent fields (a retval of 0, no
        # branches); a longer one comes from a tracer of another layout.
        raise CaptureError(
            f"LBR tracer sent a {len(data)}-byte record; struct lbr_hit is {size} bytes "
            f"(the tracer object and this pytest-lbr disagree: reinstall pytest-lbr)"
        )
    rec: Any = record.from_buffer_copy(data)
    if rec.type != layout.constants["LBR_RECORD_HIT"]:
        raise CaptureError(f"LBR tracer sent an unknown record type {rec.type}")
    n = min(rec.nr_entries, layout.max_entries)
    return RawHit(
        target=rec.cookie >> 32,
        function=rec.cookie & 0xFFFFFFFF,
        cpu=rec.cpu,
        pid=rec.pid,
        tid=rec.tid,
        ts_ns=rec.ts_ns,
        retval=rec.retval if rec.flags & layout.constants["LBR_HIT_HAS_RETVAL"] else None,
        snapshot_ret=rec.snapshot_ret,
        entries=[(e.from_, e.to, e.flags) for e in rec.entries[:n]],
        func_ip=rec.func_ip,
        hook=rec.hook,
        comm=rec.comm.decode(errors="replace"),
        in_interrupt=bool(rec.flags & layout.constants["LBR_HIT_IN_INTERRUPT"]),
    )
