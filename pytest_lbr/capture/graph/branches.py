"""A nested step of the function tracer's records as a hit's branch (pure: no I/O).

`append_step` adds a call or return (`pytest_lbr.capture.graph.calls.Step`) to a hit,
as the edge it is; `event_retval` reads a return probe's value from its event's
body; `first_time` is when a step happened. Every kind of target cuts its hits
with them (`pytest_lbr.capture.kinds`).
"""

from __future__ import annotations

import functools

from pytest_lbr.capture.graph.calls import Step, is_exception_handler
from pytest_lbr.capture.graph.text import FunctionRecord
from pytest_lbr.model import EXCEPTION_ENTRY, UNSEEN_CALLER, Branch, Hit, Location
from pytest_lbr.noise import PROBE_HANDLERS

__all__ = ["append_step", "event_retval", "first_time"]


def first_time(steps: list[Step], step: Step) -> tuple[int, int]:
    """cpu and time of the first record at or after `step` (an unseen frame has none)."""
    for s in steps[steps.index(step) :]:
        if isinstance(s.record, FunctionRecord):
            return s.record.cpu, s.record.ts_ns
    return 0, 0


def append_step(hit: Hit, step: Step) -> None:
    frame = step.frame
    if frame is None:
        return
    call = frame.call
    if call is None:
        branch = _branch(step.kind == "call", frame.addr, frame.func, None, None, 0)
    else:
        branch = _branch(
            step.kind == "call",
            frame.addr,
            frame.func,
            call.parent_addr,
            call.parent,
            call.parent_off,
        )
    hit.raw_branches.append(branch)
    for f in step.stack:  # a loop, not any(): this runs for every step of every hit
        if f.func in PROBE_HANDLERS:
            return
    hit.branches.append(branch)


#: The same call sites come back hit after hit, poll after poll: each branch is
#: built (and named, which goes by object) once. Branches are frozen: hits share them.
@functools.lru_cache(maxsize=1 << 14)
def _branch(
    call: bool, addr: int, func: str, site_addr: int | None, site: str | None, site_off: int
) -> Branch:
    """The branch of a call into function `func` (at `addr`) or a return from it;
    `site_addr` None: entered unseen, its caller unknown."""
    entry = Location(addr, func, 0)
    if site_addr is None:
        # Entered unseen: an explicit frame whose caller is unknown, or an exception
        # handler the CPU entered (noinstr, so only its callees name it).
        source = EXCEPTION_ENTRY if is_exception_handler(func) else UNSEEN_CALLER
        if call:
            return Branch(source, entry, "unseen")
        return Branch(entry, source, "ret")
    where = Location(site_addr, site, site_off)
    if call:
        return Branch(where, entry, "call")
    # Function tracing does not see the ret instruction: the return is shown
    # from the function (+0x0) back to its call site.
    return Branch(entry, where, "ret")


@functools.lru_cache(maxsize=1024)
def event_retval(body: str) -> int | None:
    # kretprobe event body: "(vfs_write+0x0/0x3f0 <- ksys_write+0x6a/0xe0) ret=0x1"
    for part in body.split():
        if part.startswith("ret="):
            value = int(part[4:], 0)
            return value - (1 << 64) if value >= 1 << 63 else value
    return None
