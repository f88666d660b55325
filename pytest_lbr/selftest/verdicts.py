"""The selftest's verdicts: plain functions from records to one `Result` each.

Nothing here touches the kernel: the live run (`pytest_lbr.selftest.run`) collects
the records, these functions judge them, so a host test can feed records built
from real addresses and check every verdict, failures included.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_lbr.capture.trim import trim_tracer
from pytest_lbr.model import CALL_KINDS, Branch, Location, Trace
from pytest_lbr.noise import TRACER_SYMBOLS

__all__ = [
    "FILTER_KINDS",
    "NOT_AVAILABLE",
    "WASTED_BAR",
    "FAIL",
    "PASS",
    "CallSite",
    "LbrFacts",
    "Result",
    "agreement",
    "call_edges",
    "edge_agreement",
    "filter_kinds",
    "graph_calls",
    "jit_lines",
    "lbr_presence",
    "not_available",
    "snapshot_depth",
    "trimming",
    "wasted_entries",
]

PASS, FAIL, NOT_AVAILABLE = "pass", "fail", "not available"

#: The kernel's own selftest (tools/testing/selftests/bpf/prog_tests/get_branch_snapshot.c)
#: asserts fewer than this many entries wasted before the traced function's records.
WASTED_BAR = 10

#: --lbr-filter -> the Branch.kind values its records may have. "unknown" is a far
#: branch (interrupt, exception, SYSRET/IRET) that perf reports without a type we map:
#: the call and return filters let those through on x86 (X86_BR_IRQ and friends).
FILTER_KINDS: dict[str, frozenset[str]] = {
    "any": frozenset({"call", "ret", "jmp", "cond", "ind_call", "ind_jmp", "syscall", "unknown"}),
    "any_call": frozenset({"call", "ind_call", "syscall", "unknown"}),
    "any_return": frozenset({"ret", "unknown"}),
    "call": frozenset({"call"}),
    "ind_call": frozenset({"ind_call"}),
    "cond": frozenset({"cond"}),
    "call_stack": frozenset({"call", "ind_call", "ret", "syscall", "unknown"}),
    "ind_jump": frozenset({"ind_jmp"}),
}


@dataclass(frozen=True)
class Result:
    """One line of the selftest: what was checked, the verdict, why, and the number measured."""

    name: str
    status: str
    detail: str
    value: int | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return f"[{self.status}] {self.name}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        """The result as plain data for the bundle."""
        return asdict(self)


def not_available(name: str, reason: str) -> Result:
    """An item this machine cannot check, and why."""
    return Result(name, NOT_AVAILABLE, reason)


# -- LBR presence -------------------------------------------------------------------


@dataclass(frozen=True)
class LbrFacts:
    """What the machine says about LBR before anything is traced."""

    cpu_model: str = ""
    #: /sys/bus/event_source/devices/cpu/caps/branches (LBR depth), None when absent.
    caps_branches: int | None = None
    #: The LBR-related /proc/cpuinfo flags present (arch_lbr, amd_lbr_v2, hypervisor, ...).
    cpu_flags: tuple[str, ...] = ()
    #: N of the boot log's "N-deep LBR", None when the log has no such line.
    dmesg_depth: int | None = None

    @property
    def hypervisor(self) -> bool:
        return "hypervisor" in self.cpu_flags

    @property
    def claims_lbr(self) -> bool:
        """Whether anything here says the CPU records branches."""
        return bool(
            self.caps_branches
            or self.dmesg_depth
            or {"arch_lbr", "amd_lbr_v2"} & set(self.cpu_flags)
        )

    def summary(self) -> str:
        flags = ",".join(self.cpu_flags) or "no arch_lbr/amd_lbr_v2/hypervisor flag"
        caps = f"caps/branches={self.caps_branches}" if self.caps_branches else "no caps/branches"
        dmesg = (
            f"dmesg '{self.dmesg_depth}-deep LBR'"
            if self.dmesg_depth
            else "no 'N-deep LBR' in dmesg"
        )
        return f"{caps}, {flags}, {dmesg}"


def lbr_presence(facts: LbrFacts, probe_reason: str) -> Result:
    """LBR presence: the probe's answer (`probe_reason`, "" = it works) against what the
    machine claims. Claimed but failing is a failure; neither is "not available"."""
    name = "LBR presence"
    if not probe_reason:
        return Result(name, PASS, f"bpf_get_branch_snapshot() returns records; {facts.summary()}")
    if facts.claims_lbr:
        return Result(name, FAIL, f"the machine claims LBR ({facts.summary()}) but: {probe_reason}")
    where = " (under a hypervisor)" if facts.hypervisor else ""
    return Result(name, NOT_AVAILABLE, f"{probe_reason}; {facts.summary()}{where}")


# -- what one snapshot holds --------------------------------------------------------


def snapshot_depth(returned: Sequence[int], expected: int | None) -> Result:
    """Entries each snapshot returned against the depth expected (the LBR's, capped at what
    one tracer record holds; None: unknown)."""
    name = "snapshot depth"
    if not returned:
        return Result(name, FAIL, "no snapshot was taken: the test program's hit never came")
    depth = max(returned)
    seen = f"{depth} entries (over {len(returned)} snapshot(s), fewest {min(returned)})"
    if depth == 0:
        return Result(name, FAIL, f"every snapshot was empty: {seen}", depth)
    if expected is not None and depth < expected:
        return Result(name, FAIL, f"{seen}, fewer than the {expected} expected", depth)
    return Result(
        name, PASS, f"{seen}" + (f", as expected ({expected})" if expected else ""), depth
    )


def _in(symbol: str) -> Any:
    return lambda loc: loc.symbol == symbol


def _touches(b: Branch, symbol: str) -> bool:
    return b.src.symbol == symbol or b.dst.symbol == symbol


def wasted_entries(raw: Sequence[Sequence[Branch]], traced: str) -> Result:
    """Entries the tracer's own code costs: per snapshot (oldest first, symbolized), the
    records newer than the newest one touching the `traced` function. Worst snapshot wins."""
    name = "wasted entries"
    counts = []
    for branches in raw:
        if not any(_touches(b, traced) for b in branches):
            return Result(
                name,
                FAIL,
                f"a snapshot of {len(branches)} entries has none in {traced}: all wasted",
                len(branches),
            )
        counts.append(len(branches) - len(trim_tracer(branches, _in(traced))))
    if not counts:
        return Result(name, FAIL, "no snapshot to measure")
    worst = max(counts)
    detail = f"{worst} (bar: < {WASTED_BAR}, the kernel selftest's; aim: <= 2 on Linux 6.11+)"
    if len(counts) > 1:
        detail += f"; per snapshot {counts}"
    return Result(
        name, PASS if worst < WASTED_BAR else FAIL, detail, worst, {"per_snapshot": counts}
    )


def filter_kinds(filter: str, branches: Sequence[Branch]) -> Result:
    """A branch filter's records have only its kinds."""
    name = f"filter {filter}"
    allowed = FILTER_KINDS[filter]
    if not branches:
        return Result(name, FAIL, "no records under this filter")
    if filter != "any" and all(b.kind == "unknown" for b in branches):
        return Result(name, FAIL, f"{len(branches)} records, none with a branch type saved")
    wrong = [b for b in branches if b.kind not in allowed]
    kinds = sorted({b.kind for b in branches})
    if wrong:
        return Result(
            name,
            FAIL,
            f"{len(wrong)} of {len(branches)} records are not {'/'.join(sorted(allowed))}: "
            f"first {wrong[0].kind} {wrong[0]}",
            len(wrong),
        )
    return Result(name, PASS, f"{len(branches)} records, kinds {','.join(kinds)}", 0)


def trimming(raw: Sequence[Branch], kept: Sequence[Branch], traced: str) -> Result:
    """Trimming kept the target's own records: `kept` is a prefix of `raw`, ends with a
    record of `traced`, and nothing dropped touches `traced`."""
    name = "trimming"
    if list(raw[: len(kept)]) != list(kept):
        return Result(name, FAIL, "the kept records are not the oldest of the snapshot")
    own = [b for b in raw if _touches(b, traced)]
    if not own:
        return Result(name, FAIL, f"the snapshot has no record of {traced}")
    if not kept or not _touches(kept[-1], traced):
        return Result(name, FAIL, f"kept {len(kept)} records, not ending in {traced}")
    dropped = list(raw[len(kept) :])
    lost = [b for b in dropped if _touches(b, traced)]
    if lost:
        return Result(name, FAIL, f"dropped {len(lost)} record(s) of {traced}: first {lost[0]}")
    ours = [b for b in dropped if _is_tracer(b)]
    return Result(
        name,
        PASS,
        f"kept {len(kept)} of {len(raw)} records, the newest in {traced}; dropped "
        f"{len(dropped)} ({len(ours)} in the tracer's own code)",
        len(kept),
    )


def _is_tracer(b: Branch) -> bool:
    return any(
        s is not None and any(fnmatch.fnmatchcase(s, p) for p in TRACER_SYMBOLS)
        for s in (b.src.symbol, b.dst.symbol)
    )


# -- symbols ------------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    """One call in the test program's JIT image: the call instruction as the symbolizer
    names it, the callee kallsyms names, and the source text BTF keeps for its line."""

    location: Location
    callee: str | None
    #: The line's text from the program's BTF line info; None when it carries none.
    text: str | None = None


def jit_lines(sites: Sequence[CallSite], callees: Sequence[str], file: str) -> Result:
    """Each helper of `callees` is called from a line of `file`, in that order of lines,
    and where the line info keeps the source text, that line names the helper."""
    name = "JIT lines"
    if not sites:
        return Result(name, FAIL, "no call found in the program's JIT image")
    seen = ", ".join(f"{s.callee or '?'} at {s.location.addr:#x}" for s in sites)
    lines: list[int] = []
    texts = True  # every line checked had its text
    for callee in callees:
        site = next((s for s in sites if s.callee == callee), None)
        if site is None:
            return Result(name, FAIL, f"no call to {callee} in the JIT image; its calls: {seen}")
        loc = site.location
        if loc.file is None or not loc.file.endswith(file) or loc.line is None:
            got = loc.source or "no line"
            return Result(
                name, FAIL, f"the {callee} call at {loc.addr:#x} symbolizes to {got}, not {file}"
            )
        texts = texts and site.text is not None
        if site.text is not None and callee not in site.text:
            return Result(
                name,
                FAIL,
                f"the {callee} call at {loc.addr:#x} is on {file}:{loc.line}, which reads "
                f"{site.text.strip()!r}",
            )
        if lines and loc.line <= lines[-1]:
            return Result(
                name,
                FAIL,
                f"the {callee} call is on {file}:{loc.line}, not after the "
                f"{callees[len(lines) - 1]} call's line {lines[-1]}",
            )
        lines.append(loc.line)
    shown = ", ".join(f"{c} at {file}:{line}" for c, line in zip(callees, lines, strict=True))
    named = "; each line's text names its helper" if texts else "; no line text to check"
    return Result(name, PASS, f"calls in the JIT image: {shown}{named}", 0)


# -- the backends against each other -----------------------------------------------


def call_edges(branches: Iterable[Branch], by: str | None = None) -> set[tuple[str, str]]:
    """(caller, callee) of every call among `branches` (made by `by`, if given)."""
    return {
        (b.src.symbol or "?", b.dst.symbol or "?")
        for b in branches
        if b.kind in CALL_KINDS and (by is None or b.src.symbol == by)
    }


def graph_calls(trace: Trace, program: str, callees: Sequence[str]) -> Result:
    """The graph backend's trace of the program shows each of its calls."""
    name = "graph backend"
    if not trace.hits:
        return Result(name, FAIL, f"no hit of {program}")
    edges = call_edges(trace.branches(), by=program)
    missing = [c for c in callees if (program, c) not in edges]
    if missing:
        seen = ", ".join(sorted(f"{a} -> {b}" for a, b in edges)) or "none"
        return Result(name, FAIL, f"no call {program} -> {missing[0]}; its calls: {seen}")
    return Result(name, PASS, f"{program} -> {', '.join(callees)} seen ({len(trace.hits)} hit(s))")


def agreement(lbr: Trace, graph: Trace, program: str) -> Result:
    """Every call edge the LBR saw inside `program` is in the graph trace of the same run."""
    lbr_edges = call_edges(lbr.branches(), by=program)
    if not lbr_edges:
        return Result("backends agree", FAIL, f"the LBR trace has no call made by {program}")
    return edge_agreement("backends agree", lbr_edges, call_edges(graph.branches()), program)


def edge_agreement(
    name: str, lbr_edges: set[tuple[str, str]], graph_edges: set[tuple[str, str]], what: str
) -> Result:
    """Every (caller, callee) of `lbr_edges` is in `graph_edges`; the missing ones fail."""
    missing = sorted(lbr_edges - graph_edges)
    if missing:
        shown = "; ".join(f"{a} -> {b}" for a, b in missing)
        return Result(
            name,
            FAIL,
            f"{len(missing)} of {len(lbr_edges)} LBR call edges of {what} missing from the "
            f"graph trace: {shown}",
            len(missing),
            {"missing": [list(e) for e in missing]},
        )
    return Result(
        name, PASS, f"all {len(lbr_edges)} LBR call edges of {what} are in the graph trace", 0
    )
