"""The LBR tracer's records decoded: perf_branch_entry records into `Branch`es
between bare addresses (oldest first, the tracer's own newest records included:
`pytest_lbr.tracer` names the addresses and trims those off), and a capture's
records into a `Trace`. Pure but for the command name of a thread whose record
carries none (`pytest_lbr.kernel.tasks`), so host tests check it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.kernel.machine import Machine
from pytest_lbr.kernel.tasks import live_comm
from pytest_lbr.model import Branch, Hit, Location, Trace
from pytest_lbr.targets import Target

__all__ = [
    "BRANCH_TYPE_KINDS",
    "BranchFlags",
    "branch_kind",
    "decode_branches",
    "decode_flags",
    "decode_trace",
]

#: perf_branch_entry.type (PERF_BR_*) -> Branch.kind.
BRANCH_TYPE_KINDS = {
    1: "cond",
    2: "jmp",
    3: "ind_jmp",
    4: "call",
    5: "ind_call",
    6: "ret",
    7: "syscall",
}


@dataclass(frozen=True)
class BranchFlags:
    """The decoded perf_branch_entry flag word."""

    mispred: bool
    predicted: bool
    in_tx: bool
    abort: bool
    cycles: int
    type: int


def decode_flags(flags: int) -> BranchFlags:
    """Split the u64 bitfield: mispred:1 predicted:1 in_tx:1 abort:1 cycles:16 type:4 ..."""
    return BranchFlags(
        mispred=bool(flags & 1),
        predicted=bool(flags >> 1 & 1),
        in_tx=bool(flags >> 2 & 1),
        abort=bool(flags >> 3 & 1),
        cycles=flags >> 4 & 0xFFFF,
        type=flags >> 20 & 0xF,
    )


def branch_kind(flags: int) -> str:
    """Branch.kind for a perf_branch_entry flag word ("unknown" when the type is not saved)."""
    return BRANCH_TYPE_KINDS.get(decode_flags(flags).type, "unknown")


def decode_branches(
    entries: Sequence[tuple[int, int, int]], locations: dict[int, Location] | None = None
) -> list[Branch]:
    """Records as the CPU gives them (newest first) -> `Branch`es oldest first, between
    the `locations` of their addresses (bare addresses where none is given)."""
    locations = locations or {}
    out = []
    for src, dst, flags in reversed(entries):
        f = decode_flags(flags)
        out.append(
            Branch(
                src=locations.get(src) or Location(src),
                dst=locations.get(dst) or Location(dst),
                kind=BRANCH_TYPE_KINDS.get(f.type, "unknown"),
                mispredicted=f.mispred,
                cycles=f.cycles,
            )
        )
    return out


def decode_trace(
    targets: Sequence[Target],
    raw: Sequence[RawHit],
    attached: Sequence[Any],
    machine: Machine,
    *,
    lost: int = 0,
    notes: Sequence[str] = (),
) -> tuple[Trace, dict[str, str]]:
    """The tracer's records as a `Trace` of `machine` (its arch and release), and the
    symbol each hit target's hook traced (what `LbrCapture.trim` keeps branches up to).

    `attached[i]` is what target i resolved to (`HookSet.attached`: its functions,
    a program's kallsyms name). Branches are between bare addresses, the tracer's
    own included (`branches` and `raw_branches` alike).
    """
    trace = Trace(
        targets=[t.spec for t in targets],
        backend="lbr",
        lost=lost,
        kernel_release=machine.release,
        arch=machine.name,
        notes=list(notes),
    )
    traced_by: dict[str, str] = {}
    comms: dict[int, str] = {}
    for h in raw:
        where = attached[h.target] if h.target < len(attached) else None
        func = where.functions[h.function] if where and h.function < len(where.functions) else None
        target = targets[h.target] if h.target < len(targets) else None
        name = target.spec if target else f"#{h.target}"
        if target is not None and target.is_glob and func:
            name = f"kfunc:{func}"
        traced = _traced_symbol(target, func, where.ksym if where else "")
        if traced:
            traced_by[name] = traced
        branches = decode_branches(h.entries)
        trace.hits.append(
            Hit(
                target=name,
                cpu=h.cpu,
                pid=h.pid,
                tid=h.tid,
                retval=h.retval,
                branches=list(branches),
                raw_branches=branches,
                timestamp_ns=h.ts_ns,
                comm=h.comm or comms.setdefault(h.tid, live_comm(h.tid)),
                in_interrupt=h.in_interrupt,
            )
        )
    return trace, traced_by


def _traced_symbol(target: Target | None, func: str | None, ksym: str) -> str | None:
    """The symbol of the function a hit's hook traced (None when the hook has none)."""
    return None if target is None else kind_of(target).traced_symbol(func, ksym)
