"""Kernel functions (``kfunc:NAME``, ``kfunc:GLOB*``): hooked, armed and cut.

The LBR tracer hooks a function with fentry/fexit, a glob with kprobe.multi (or its
fallback, one kprobe or one fentry per function). The graph backend matches the
functions' records, and for a single function adds a kretprobe event carrying its
return value; a hit is one outermost invocation with everything under it (with the
kretprobe, from its call to its return event).
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import ClassVar

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.branches import append_step, event_retval, first_time
from pytest_lbr.capture.graph.calls import Step
from pytest_lbr.capture.graph.text import EventRecord
from pytest_lbr.capture.hooks.state import Attached
from pytest_lbr.capture.kinds.protocol import (
    GraphArming,
    HitCutting,
    Hooking,
    Matcher,
    TargetKind,
)
from pytest_lbr.kernel.functions import btf_problem, matching_functions
from pytest_lbr.model import Hit
from pytest_lbr.targets import Target

__all__ = ["KFUNC", "KernelFunction", "glob_matcher"]


def glob_matcher(pattern: str) -> Matcher:
    """Whether a code location (symbol, address) is a function `pattern` names."""
    if not any(c in pattern for c in "*?["):
        return lambda name, addr: name == pattern  # one function: asked at every call
    match = re.compile(fnmatch.translate(pattern)).match
    return lambda name, addr: match(name) is not None


class KernelFunction(TargetKind):
    """``kfunc:NAME`` and ``kfunc:GLOB*``."""

    names: ClassVar[tuple[str, ...]] = ("kfunc",)
    ends_at_return_event: ClassVar[bool] = True
    narrows: ClassVar[bool] = True

    def shared_programs(
        self, target: Target, *, ret: bool, fallback: str
    ) -> list[tuple[bool, str]]:
        if not target.is_glob:
            return []  # fentry/fexit, an object of its own
        names = [(False, "lbr_kretprobe_multi" if ret else "lbr_kprobe_multi")]
        if fallback != "fentry":  # one kprobe per function without kprobe.multi
            names.append((False, "lbr_kretprobe" if ret else "lbr_kprobe"))
        return names

    def attach(self, hooks: Hooking, index: int, target: Target) -> Attached:
        assert target.function is not None
        if target.is_glob:
            return hooks.attach_glob(index, target)
        problem = btf_problem(target)
        if problem:
            raise CaptureError(problem)
        hooks.attach_trace(index, target.spec, 0, target.function)
        return Attached(target, [target.function], "fentry" if hooks.fentry else "fexit")

    def traced_symbol(self, func: str | None, ksym: str) -> str | None:
        return func

    def arm_graph(self, arming: GraphArming, index: int, target: Target) -> None:
        assert target.function is not None
        pattern = target.function
        if not matching_functions(arming.available(), pattern):
            raise CaptureError(f"{target.spec}: no traceable kernel function matches {pattern!r}")
        arming.matchers.append(glob_matcher(pattern))
        if not target.is_glob:
            event = arming.inst.add_probe("kprobe", f"r {pattern} ret=$retval")
            arming.returns[event.split("/")[1]] = pattern
            arming.events[index] = event.split("/")[1]

    def graph_hits(self, cut: HitCutting, index: int, target: Target) -> list[Hit]:
        return _frame_hits(target, cut.matchers[index], cut.events.get(index), cut.tid, cut.steps)


KFUNC = KernelFunction()


def _frame_hits(
    target: Target,
    match: Matcher,
    ret_event: str | None,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """One hit per outermost frame of a matching function, with everything under it."""
    if ret_event is not None:
        return _hits_until_return(target, match, ret_event, tid, steps)
    hits: list[Hit] = []
    hit: Hit | None = None
    depth = 0
    for step in steps:
        if hit is None:
            frame = step.frame
            if step.kind == "call" and frame is not None and match(frame.func, frame.addr):
                if any(match(f.func, f.addr) for f in step.stack[:-1]):
                    continue
                rec = step.record
                hit = Hit(target.spec, pid=os.getpid(), tid=tid)
                hit.cpu, hit.timestamp_ns = (rec.cpu, rec.ts_ns) if rec else first_time(steps, step)
                depth = len(step.stack)
                append_step(hit, step)
            continue
        if step.kind == "event":
            rec = step.record
            # Our frame's return only if no nested call of the function is above it.
            if (
                isinstance(rec, EventRecord)
                and rec.name == ret_event
                and not any(match(f.func, f.addr) for f in step.stack[depth:])
            ):
                hit.retval = event_retval(rec.body)
            continue
        append_step(hit, step)
        if step.kind == "ret" and len(step.stack) == depth:
            hits.append(hit)
            hit = None
    if hit is not None:
        hits.append(hit)
    return hits


def _hits_until_return(
    target: Target,
    match: Matcher,
    ret_event: str,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """With a kretprobe on the function, a hit runs from its call to its return event.

    Every record of the thread in between is the function's own work, however the
    call-only records nest: a frame popped early because some caller was never
    recorded must not cut one call into several hits (seen with tcp_v4_connect).
    The returns that follow the event still belong to the hit.
    """
    hits: list[Hit] = []
    hit: Hit | None = None
    open_calls = 0
    returning = False
    depth = 0  # of the hit's frame
    for step in steps:
        frame = step.frame
        recorded_call = (
            step.kind == "call"
            and frame is not None
            and step.record is not None
            and match(frame.func, frame.addr)
        )
        if hit is not None and recorded_call and len(step.stack) <= depth:
            # Called again where the hit's own frame was: the nesting popped it, so
            # it returned and its return event never came (records lost when the
            # ring buffer overran, or a kretprobe's missed return). Without this
            # one lost event would make every later call of the thread's part of it.
            hits.append(hit)
            hit = None  # and this call starts the next hit, below
        if hit is None:
            # The returns from the hit's frame and the frames above it, which its
            # return event pops; not those of its callers (the next record's).
            if returning and step.kind == "ret" and hits and len(step.stack) >= depth:
                append_step(hits[-1], step)
                continue
            returning = False
            if recorded_call:
                rec = step.record
                assert rec is not None
                hit = Hit(
                    target.spec, pid=os.getpid(), tid=tid, cpu=rec.cpu, timestamp_ns=rec.ts_ns
                )
                open_calls, depth = 1, len(step.stack)
                append_step(hit, step)
            continue
        if step.kind == "event":
            rec = step.record
            if isinstance(rec, EventRecord) and rec.name == ret_event:
                open_calls -= 1
                if open_calls == 0:
                    hit.retval = event_retval(rec.body)
                    hits.append(hit)
                    hit, returning = None, True
            continue
        if recorded_call:
            open_calls += 1  # a real nested (recursive) call
        append_step(hit, step)
    if hit is not None:
        hits.append(hit)
    return hits
