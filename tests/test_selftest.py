"""The selftest's verdicts on LBR records built from real code addresses.

No machine here has LBR, so the records are synthesized the way the CPU would
give them around an fexit on the selftest's own program (bpf/lbr_selftest.bpf.c,
built by clang and loaded through libbpf): every address is real, the program's
calls are read from its JIT image as loaded on this host (capstone),
helpers and the tracer's code are this host's kallsyms, and the whole symbolizer
names them. Each verdict is checked passing and failing, including a disagreement
between the backends it must flag.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest

from pytest_lbr.capture.lbr.decode import decode_branches
from pytest_lbr.capture.trim import trim_tracer
from pytest_lbr.cli import main
from pytest_lbr.model import Branch, Hit, Location, Trace
from pytest_lbr.report.record import TestRecord
from pytest_lbr.report.render import write_test_files
from pytest_lbr.selftest import program as selftest_program
from pytest_lbr.selftest.compare import compare_reports
from pytest_lbr.selftest.facts import lbr_facts
from pytest_lbr.selftest.verdicts import (
    FAIL,
    NOT_AVAILABLE,
    PASS,
    CallSite,
    LbrFacts,
    agreement,
    filter_kinds,
    graph_calls,
    jit_lines,
    lbr_presence,
    snapshot_depth,
    trimming,
    wasted_entries,
)
from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.kallsyms import KernelSymbols
from tests.bpf.objects import SELFTEST_SOURCE, require_root, selftest_call_lines

COND, UNCOND, CALL, IND_CALL, RET = 1, 2, 4, 5, 6  # PERF_BR_*


def flags(kind: int) -> int:
    return kind << 20


@dataclasses.dataclass
class Snapshot:
    """An fexit snapshot of one run of the selftest program, oldest record first."""

    entries: list[tuple[int, int, int]]  # as the CPU gives them: newest first
    program: str  # the program's symbol as the symbolizer names it
    branches: list[Branch]  # decoded and symbolized, oldest first
    thunk: bool  # the program returns through a return thunk: one more record after it


@pytest.fixture(scope="module")
def loaded() -> Iterator[selftest_program.SelftestProgram]:
    require_root()
    with selftest_program.load_program() as prog:
        yield prog


def _ksym(k: KernelSymbols, *names: str) -> int:
    for name in names:
        addr = k.address_of(name)
        if addr:
            return addr
    pytest.skip(f"none of {names} in this kernel's kallsyms")


@pytest.fixture(scope="module")
def snapshot(loaded: selftest_program.SelftestProgram) -> Snapshot:
    from pytest_lbr.programs.lines import jited_image
    from pytest_lbr.symbols.disasm import disassemble

    start, code = jited_image(loaded.fd)
    insns = disassemble(code, start)
    calls = [i for i in insns if i.mnemonic == "call"]
    assert len(calls) == 2, [str(i) for i in insns]  # the two helper calls
    last = insns[-1]  # `ret`, or with return thunks (retbleed, v5.19) a `jmp` to one
    k = KernelSymbols()
    if not k.readable:
        pytest.skip("/proc/kallsyms hides addresses (run as root)")
    caller = _ksym(k, "bpf_test_run", "bpf_prog_test_run_xdp")
    enter = _ksym(k, "__bpf_prog_enter_recur", "__bpf_prog_enter")
    migrate = _ksym(k, "migrate_disable", "__rcu_read_lock")
    helper = _ksym(k, "bpf_get_branch_snapshot")
    targets = [int(c.operands, 16) for c in calls]
    oldest_first = [
        (caller + 0x40, start, flags(IND_CALL)),
        (start + 0x4, start + 0x9, flags(COND)),
        (calls[0].addr, targets[0], flags(CALL)),
        (targets[0] + 0x10, calls[0].addr + calls[0].size, flags(RET)),
        (calls[1].addr, targets[1], flags(CALL)),
        (targets[1] + 0x8, calls[1].addr + calls[1].size, flags(RET)),
        *(
            [(last.addr, enter + 0x10, flags(RET))]  # back into the fexit trampoline
            if last.mnemonic == "ret"
            else [
                (last.addr, int(last.operands, 16), flags(UNCOND)),
                (int(last.operands, 16), enter + 0x10, flags(RET)),
            ]
        ),
        (enter + 0x20, migrate, flags(CALL)),
        (migrate + 0x8, enter + 0x25, flags(RET)),
        (enter + 0x30, helper, flags(CALL)),
    ]
    entries = list(reversed(oldest_first))
    sym = get_symbolizer()
    locs = sym.locate_many(a for e in entries for a in e[:2])
    program = locs[start].symbol
    assert program == selftest_program.NAME
    assert [locs[t].symbol for t in targets] == list(selftest_program.CALLEES)
    return Snapshot(entries, program, decode_branches(entries, locs), last.mnemonic != "ret")


# -- LBR presence ---------------------------------------------------------------


ENOENT_REASON = (
    "no PMU: perf_event_open(PERF_TYPE_HARDWARE, cycles, branch stack) failed with ENOENT "
    "(a VM without a virtual PMU?)"
)


def test_presence_without_any_claim_is_not_available_with_the_reason() -> None:
    r = lbr_presence(LbrFacts("AMD EPYC", None, ("hypervisor",), None), ENOENT_REASON)
    assert r.status == NOT_AVAILABLE
    assert r.detail.startswith(ENOENT_REASON) and "under a hypervisor" in r.detail


@pytest.mark.parametrize(
    "facts",
    [
        LbrFacts(caps_branches=32),
        LbrFacts(cpu_flags=("arch_lbr",)),
        LbrFacts(cpu_flags=("amd_lbr_v2",)),
        LbrFacts(dmesg_depth=16),
    ],
)
def test_presence_claimed_but_failing_is_a_failure(facts: LbrFacts) -> None:
    r = lbr_presence(facts, ENOENT_REASON)
    assert r.status == FAIL and "claims LBR" in r.detail and "ENOENT" in r.detail


def test_presence_when_the_probe_works() -> None:
    r = lbr_presence(LbrFacts(caps_branches=32, dmesg_depth=32), "")
    assert r.status == PASS
    assert "caps/branches=32" in r.detail and "'32-deep LBR'" in r.detail


def test_facts_read_the_boot_log_line() -> None:
    log = ["6,123,0,-;Performance Events: XSAVE Architectural LBR, PEBS fmt4+-baseline, "
           "AnyThread deprecated, Alderlake Hybrid events, 32-deep LBR, full-width counters"]  # fmt: skip
    assert lbr_facts(log).dmesg_depth == 32
    assert lbr_facts([]).dmesg_depth is None


# -- one snapshot ----------------------------------------------------------------


def test_depth_against_what_the_lbr_holds() -> None:
    assert snapshot_depth([32, 32], 32).status == PASS
    short = snapshot_depth([9, 10], 32)
    assert (short.status, short.value) == (FAIL, 10) and "fewer than the 32" in short.detail
    assert snapshot_depth([0], None).status == FAIL
    assert snapshot_depth([], 32).status == FAIL
    assert snapshot_depth([16], None).status == PASS


def test_wasted_entries_are_the_tracers_records_after_the_program(snapshot: Snapshot) -> None:
    r = wasted_entries([snapshot.branches], snapshot.program)
    # (the return thunk's ret,) trampoline entry, migrate_disable and back, the helper's call
    wasted = 3 + snapshot.thunk
    assert (r.status, r.value) == (PASS, wasted)
    assert r.detail.startswith(f"{wasted} (bar: < 10")


def test_wasted_entries_at_the_bar_fail(snapshot: Snapshot) -> None:
    tracer_run = snapshot.branches[-3:] * 4  # 12 records of the tracer's own after the program
    r = wasted_entries([snapshot.branches, snapshot.branches[:-3] + tracer_run], snapshot.program)
    assert (r.status, r.value) == (FAIL, 12 + snapshot.thunk)
    assert r.data["per_snapshot"] == [3 + snapshot.thunk, 12 + snapshot.thunk]


def test_wasted_entries_without_the_program_fail(snapshot: Snapshot) -> None:
    only_tracer = snapshot.branches[-3:]
    r = wasted_entries([only_tracer], snapshot.program)
    assert r.status == FAIL and "none in lbr_selftest" in r.detail


def test_each_filter_only_its_kinds(snapshot: Snapshot) -> None:
    b = snapshot.branches
    calls = [x for x in b if x.kind in ("call", "ind_call")]
    rets = [x for x in b if x.kind == "ret"]
    assert filter_kinds("any", b).status == PASS
    assert filter_kinds("any_call", calls).status == PASS
    assert filter_kinds("any_return", rets).status == PASS
    assert filter_kinds("call_stack", calls + rets).status == PASS
    assert filter_kinds("ind_call", [x for x in b if x.kind == "ind_call"]).status == PASS
    wrong = filter_kinds("any_call", b)
    # the cond and the returns (the jump to a return thunk too)
    assert wrong.status == FAIL and wrong.value == 5 + snapshot.thunk
    assert "first cond" in wrong.detail
    assert filter_kinds("call", [x for x in b if x.kind == "ind_call"]).status == FAIL
    assert filter_kinds("cond", []).status == FAIL


def test_a_filter_without_saved_types_fails(snapshot: Snapshot) -> None:
    untyped = [dataclasses.replace(x, kind="unknown") for x in snapshot.branches]
    r = filter_kinds("any_return", untyped)
    assert r.status == FAIL and "none with a branch type saved" in r.detail


def test_trimming_keeps_the_programs_records(snapshot: Snapshot) -> None:
    raw = snapshot.branches
    kept = trim_tracer(raw, lambda loc: loc.symbol == snapshot.program)
    r = trimming(raw, kept, snapshot.program)
    assert (r.status, r.value) == (PASS, 7)
    n = 3 + snapshot.thunk
    assert f"dropped {n} ({n} in the tracer's own code)" in r.detail


def test_trimming_that_drops_or_keeps_too_much_fails(snapshot: Snapshot) -> None:
    raw, prog = snapshot.branches, snapshot.program
    assert trimming(raw, raw, prog).status == FAIL  # kept the tracer's records
    too_much = trimming(raw, raw[:4], prog)  # ends on the helper's return: fine, but...
    assert too_much.status == FAIL and "dropped 3 record(s) of lbr_selftest" in too_much.detail
    assert trimming(raw, raw[1:7], prog).status == FAIL  # not the oldest records


# -- symbols ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sites(loaded: selftest_program.SelftestProgram) -> list[CallSite]:
    return selftest_program.call_sites(loaded.fd, get_symbolizer())


def test_helper_calls_symbolize_to_their_source_lines(sites: list[CallSite]) -> None:
    csum, adjust = selftest_call_lines(*selftest_program.CALLEES)
    r = jit_lines(sites, selftest_program.CALLEES, selftest_program.FILE)
    assert r.status == PASS, r.detail
    assert r.detail == (
        f"calls in the JIT image: bpf_csum_diff at lbr_selftest.bpf.c:{csum}, "
        f"bpf_xdp_adjust_head at lbr_selftest.bpf.c:{adjust}; each line's text names its helper"
    )
    # the call instructions, named by the symbolizer as a traced branch's source is
    assert [s.callee for s in sites] == list(selftest_program.CALLEES)
    assert all(s.location.symbol == selftest_program.NAME for s in sites)
    assert all(s.location.file.endswith("bpf/lbr_selftest.bpf.c") for s in sites)  # type: ignore[union-attr]
    # the text BTF keeps is the source file's line
    source = SELFTEST_SOURCE.read_text().splitlines()
    assert [s.text for s in sites] == [source[csum - 1], source[adjust - 1]]


def test_wrong_call_sites_are_flagged(sites: list[CallSite]) -> None:
    csum, adjust = sites
    file, callees = selftest_program.FILE, selftest_program.CALLEES

    def at(site: CallSite, **change: object) -> CallSite:
        return dataclasses.replace(site, location=dataclasses.replace(site.location, **change))

    swapped = jit_lines([csum, at(adjust, line=csum.location.line)], callees, file)
    assert swapped.status == FAIL
    assert swapped.detail.startswith("the bpf_xdp_adjust_head call is on lbr_selftest.bpf.c:")
    assert "not after the bpf_csum_diff call's line" in swapped.detail
    elsewhere = jit_lines([at(csum, file="net/core/filter.c"), adjust], callees, file)
    assert elsewhere.status == FAIL and "symbolizes to net/core/filter.c:" in elsewhere.detail
    no_line = jit_lines([csum, at(adjust, file=None, line=None)], callees, file)
    assert no_line.status == FAIL and "symbolizes to no line" in no_line.detail
    misnamed = jit_lines(
        [csum, dataclasses.replace(adjust, text="\treturn XDP_PASS;")], callees, file
    )
    assert misnamed.status == FAIL and misnamed.detail.endswith("which reads 'return XDP_PASS;'")
    missing = jit_lines([csum], callees, file)
    assert missing.status == FAIL
    assert missing.detail.startswith("no call to bpf_xdp_adjust_head in the JIT image; its calls: ")
    assert jit_lines([], callees, file).status == FAIL
    no_text = [dataclasses.replace(s, text=None) for s in sites]
    unchecked = jit_lines(no_text, callees, file)
    assert unchecked.status == PASS and unchecked.detail.endswith("; no line text to check")


def test_the_program_runs(loaded: selftest_program.SelftestProgram) -> None:
    assert loaded.run().retval == 2  # XDP_PASS


# -- the backends against each other ---------------------------------------------


def _graph_trace(program: str, callees: list[str]) -> Trace:
    """The graph backend's shape: call/ret records between named functions."""
    out = []
    for callee in callees:
        out.append(Branch(Location(0, program), Location(0, callee), "call"))
        out.append(Branch(Location(0, callee), Location(0, program), "ret"))
    hit = Hit("prog:1", branches=out, raw_branches=out)
    return Trace(["prog:1"], backend="graph", hits=[hit])


def _lbr_trace(snapshot: Snapshot) -> Trace:
    kept = trim_tracer(snapshot.branches, lambda loc: loc.symbol == snapshot.program)
    hit = Hit("prog:1", branches=kept, raw_branches=snapshot.branches)
    return Trace(["prog:1"], backend="lbr", hits=[hit])


def test_backends_agree(snapshot: Snapshot) -> None:
    graph = _graph_trace(snapshot.program, list(selftest_program.CALLEES))
    r = agreement(_lbr_trace(snapshot), graph, snapshot.program)
    assert (r.status, r.value) == (PASS, 0)
    assert graph_calls(graph, snapshot.program, selftest_program.CALLEES).status == PASS


def test_a_disagreement_is_flagged(snapshot: Snapshot) -> None:
    graph = _graph_trace(snapshot.program, ["bpf_csum_diff"])
    r = agreement(_lbr_trace(snapshot), graph, snapshot.program)
    assert (r.status, r.value) == (FAIL, 1)
    assert "lbr_selftest -> bpf_xdp_adjust_head" in r.detail
    assert r.data["missing"] == [["lbr_selftest", "bpf_xdp_adjust_head"]]
    missing = graph_calls(graph, snapshot.program, selftest_program.CALLEES)
    assert missing.status == FAIL and "bpf_xdp_adjust_head" in missing.detail


def test_an_lbr_trace_without_program_calls_fails(snapshot: Snapshot) -> None:
    empty = Trace(["prog:1"], backend="lbr", hits=[Hit("prog:1")])
    graph = _graph_trace(snapshot.program, list(selftest_program.CALLEES))
    assert agreement(empty, graph, snapshot.program).status == FAIL
    assert graph_calls(Trace(), snapshot.program, selftest_program.CALLEES).status == FAIL


def _report(tmp: Path, name: str, trace: Trace) -> Path:
    out = tmp / name
    write_test_files(out, TestRecord("tests/test_x.py::test_prog", tracer_traces=[trace]))
    return out


def test_compare_reports_flags_a_missing_edge(snapshot: Snapshot, tmp_path: Path) -> None:
    lbr = _report(tmp_path, "lbr", _lbr_trace(snapshot))
    good = _report(
        tmp_path, "graph", _graph_trace(snapshot.program, list(selftest_program.CALLEES))
    )
    bad = _report(tmp_path, "graph-bad", _graph_trace(snapshot.program, ["bpf_csum_diff"]))
    (ok,) = compare_reports(lbr, good)
    # bpf_test_run -> lbr_selftest ran before the graph's window: not compared
    assert ok.status == PASS and "1 made before the hook not compared" in ok.detail
    (flagged,) = compare_reports(lbr, bad)
    assert flagged.status == FAIL and "lbr_selftest -> bpf_xdp_adjust_head" in flagged.detail
    (swapped,) = compare_reports(good, lbr)
    assert swapped.status == FAIL and "--lbr-backend=lbr" in swapped.detail


# -- the command -----------------------------------------------------------------


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def test_selftest_command_writes_the_bundle_here(tmp_path: Path) -> None:
    require_root()
    code, out, err = _run("selftest", "--out", str(tmp_path / "b"))
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith(f"pytest-lbr selftest: kernel {os.uname().release}")
    assert lines[1].startswith("[not available] LBR presence: ")  # no machine here has LBR
    csum, adjust = selftest_call_lines(*selftest_program.CALLEES)
    assert (
        f"[pass] JIT lines: calls in the JIT image: bpf_csum_diff at lbr_selftest.bpf.c:{csum}, "
        f"bpf_xdp_adjust_head at lbr_selftest.bpf.c:{adjust}; each line's text names its helper"
    ) in lines
    assert lines[-1] == f"bundle: {tmp_path / 'b/selftest.json'} {tmp_path / 'b/selftest.txt'} " \
        "(attach both to an issue)"  # fmt: skip
    bundle = json.loads((tmp_path / "b/selftest.json").read_text())
    assert bundle["environment"]["kernel"] == os.uname().release
    assert len(bundle["results"]) == 15 and bundle["doctor"]
    assert (tmp_path / "b/selftest.txt").read_text().splitlines()[-1].startswith("=> 1 passed")


def test_unwritable_bundle_says_how(tmp_path: Path) -> None:
    require_root()
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = _run("selftest", "--out", str(blocker / "b"))
    assert code == 1
    assert err.strip().endswith("(pass --out DIR)") and len(err.strip().splitlines()) == 1


def test_compare_needs_report_directories(tmp_path: Path) -> None:
    code, _, err = _run("selftest", "--compare", str(tmp_path), str(tmp_path))
    assert code == 2
    assert err.strip() == (
        f"pytest-lbr: error: {tmp_path} is not a trace report directory (no .parts/): write "
        f"one with pytest --lbr --lbr-backend=lbr --lbr-report={tmp_path}"
    )
