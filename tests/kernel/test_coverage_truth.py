"""Coverage claims nothing the kernel's own counts deny (issue 51).

tests/bpf/many_arms.bpf.c has 24 arms, each counting its own runs in `arm_runs`;
the packet's first byte picks one. Runs of some arms, many times, under one trace;
then the LCOV coverage of that trace against the counters: no line of an arm that
did not run is covered, no line counts more runs than its arm had, no branch
direction is claimed never taken where the records cannot show it, and each BPF
function (the program, its subprogram) is an LCOV function at the line declaring it.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from pytest_lbr.coverage.book import CoverageBook
from pytest_lbr.coverage.formats import lcov
from pytest_lbr.coverage.program import read_code
from pytest_lbr.kernel.machine import machine
from tests.bpf.objects import bpf_object

pytestmark = pytest.mark.kernel

SOURCE = Path(__file__).resolve().parents[1] / "bpf" / "many_arms.bpf.c"
ARMS = 24
#: Arm -> runs: arms that only count, call a helper, update a map, call a subprogram.
RUNS = {0: 3, 1: 1, 8: 2, 9: 1, 12: 1, 16: 2, 17: 1, 20: 1, 21: 2, 23: 1}
#: Arms whose every run makes a call of their own the function tracer records (a
#: helper's implementation): the graph backend proves them in each run. (clang merges
#: the `bpf_map_update_elem` calls of arms 16-19 into shared code of no one line:
#: their runs prove no line of theirs, and must not prove another arm's.)
CALLING = {8, 9, 12}


def arm_lines() -> dict[int, set[int]]:
    """Arm -> the source lines marked `/* arm N */`."""
    out: dict[int, set[int]] = {}
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        found = re.search(r"/\* arm (\d+) \*/", text)
        if found:
            out.setdefault(int(found[1]), set()).add(n)
    return out


def declared(name: str) -> int:
    return next(n for n, t in enumerate(SOURCE.read_text().splitlines(), 1) if f" {name}(" in t)


def records(info: str, kind: str) -> list[list[str]]:
    return [r.split(":", 1)[1].split(",") for r in info.splitlines() if r.startswith(kind + ":")]


def test_coverage_claims_nothing_the_counters_deny(bpf, lbr) -> None:
    obj = bpf.load(bpf_object("many_arms"))
    prog = obj.programs["many_arms"]
    code = read_code(prog.fd, machine().name)
    with lbr.trace(prog) as trace:
        for arm, n in RUNS.items():
            for _ in range(n):
                prog.run(data=bytes([arm]) + bytes(63))
    (bss,) = [m for m in obj.maps if m.endswith(".bss")]
    (value,) = [v for _, v in obj.maps[bss].items()]
    counters = struct.unpack_from(f"<{ARMS}Q", value)
    assert {a: c for a, c in enumerate(counters) if c} == RUNS  # the kernel's own count

    book = CoverageBook()
    book.add_trace(trace, {prog.id: code}, {h.target: prog.id for h in trace.hits})
    (cov,) = book.sorted()
    assert cov.runs == sum(RUNS.values()), str(trace)
    info = lcov([cov])
    da = {int(ln): int(c) for ln, c in records(info, "DA")}
    by_arm = arm_lines()
    assert len(by_arm) == ARMS and set(da) & set().union(*by_arm.values())
    for arm, lines in by_arm.items():
        for ln in lines & set(da):
            assert da[ln] <= counters[arm], (
                f"line {ln} (arm {arm}) counts {da[ln]} runs of {counters[arm]}"
            )
    assert max(da.values()) <= cov.runs  # a run counts once
    if trace.backend == "graph" and not trace.no_branches:
        for arm in CALLING:  # a recorded call proves its arm in every run
            assert max(da[ln] for ln in by_arm[arm] & set(da)) == counters[arm], arm
        assert {c for *_, c in records(info, "BRDA")} == {"-"}  # no direction shown
    elif not cov.directions_complete:
        assert "0" not in {c for *_, c in records(info, "BRDA")}
    functions = {name: int(ln) for ln, name in records(info, "FN")}
    assert functions["many_arms"] == declared("many_arms")
    assert functions["account"] == declared("account")  # its subprogram
