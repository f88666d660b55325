"""Tracepoints (``tp:CATEGORY/NAME``): hooked, armed and cut.

The LBR tracer attaches its tracepoint program; the graph backend enables the
event in its instance, and a hit is one event record with the thread's calls since
its previous hit (or since arming).
"""

from __future__ import annotations

import ctypes
import os
from typing import ClassVar

from pytest_lbr.bpf.libbpf import TracepointOpts, lib
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.branches import append_step
from pytest_lbr.capture.graph.calls import Step
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.hooks.state import Attached
from pytest_lbr.capture.kinds.protocol import GraphArming, HitCutting, Hooking, TargetKind
from pytest_lbr.kernel.tracefs import TracefsError
from pytest_lbr.model import Hit
from pytest_lbr.targets import Target

__all__ = ["TRACEPOINT", "Tracepoint"]


class Tracepoint(TargetKind):
    """``tp:CATEGORY/NAME``."""

    names: ClassVar[tuple[str, ...]] = ("tp",)
    by_events: ClassVar[bool] = True

    def shared_programs(
        self, target: Target, *, ret: bool, fallback: str
    ) -> list[tuple[bool, str]]:
        return [(False, "lbr_tracepoint")]

    def attach(self, hooks: Hooking, index: int, target: Target) -> Attached:
        assert target.tracepoint is not None
        cat, _, name = target.tracepoint.partition("/")
        opts = TracepointOpts(sz=ctypes.sizeof(TracepointOpts), bpf_cookie=index << 32)
        link = lib.bpf_program__attach_tracepoint_opts(
            hooks.shared_program(False, "lbr_tracepoint"),
            cat.encode(),
            name.encode(),
            ctypes.byref(opts),
        )
        hooks.keep_link(link, f"attach to {target.spec}")
        return Attached(target, [target.tracepoint], "tracepoint")

    def arm_graph(self, arming: GraphArming, index: int, target: Target) -> None:
        assert target.tracepoint is not None
        try:
            arming.inst.enable_event(target.tracepoint)
        except TracefsError as exc:
            raise CaptureError(f"{target.spec}: {exc}") from None
        arming.matchers.append(lambda name, addr: False)  # events, not frames
        arming.events[index] = target.tracepoint.split("/")[1]

    def graph_hits(self, cut: HitCutting, index: int, target: Target) -> list[Hit]:
        return _event_hits(target, cut.events[index], cut.tid, cut.steps)

    def hit_event(self, event: str, record: FunctionRecord | EventRecord) -> bool:
        return isinstance(record, EventRecord) and _is_event(record, event)


TRACEPOINT = Tracepoint()


def _event_hits(target: Target, event: str, tid: int, steps: list[Step]) -> list[Hit]:
    """One hit per event line, with the thread's branches since the previous one."""
    hits: list[Hit] = []
    pending = Hit(target.spec, pid=os.getpid(), tid=tid)
    for step in steps:
        rec = step.record
        if step.kind == "event" and isinstance(rec, EventRecord) and _is_event(rec, event):
            pending.cpu, pending.timestamp_ns = rec.cpu, rec.ts_ns
            hits.append(pending)
            pending = Hit(target.spec, pid=os.getpid(), tid=tid)
        elif step.kind != "event":
            append_step(pending, step)
    return hits


def _is_event(rec: EventRecord, event: str) -> bool:
    if rec.name == event:
        return True
    # Syscall events print "sys_NAME(args)" / "sys_NAME -> ret", not their event name.
    for prefix in ("sys_enter_", "sys_exit_"):
        if event.startswith(prefix):
            call = "sys_" + event[len(prefix) :]
            want = "(" if prefix == "sys_enter_" else " -> "
            return rec.body.startswith(call + want)
    return False
