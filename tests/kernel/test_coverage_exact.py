"""`--lbr-cov-exact` through pytest, traced as well (issue 51): an inner suite of two
tests loading tests/bpf/many_arms.bpf.c with the `bpf` fixture and running arms
their own number of times under `lbr.trace`. Each arm counts its runs in `.bss` (the
kernel's word, saved by the inner tests); the LCOV and Cobertura files must state
exactly those counts, line by line and test by test, and the traces of the counted
program must still name its calls."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET

import pytest

from tests.bpf.objects import bpf_object
from tests.commands import PYTEST_QUIET
from tests.kernel.test_coverage_truth import arm_lines, declared, records

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

#: Test -> {arm: runs}: arm 8 calls bpf_get_prandom_u32, arm 20 the subprogram.
RUNS = {"test_first": {0: 3, 8: 2, 20: 1}, "test_second": {8: 5, 16: 4, 23: 2}}

INNER = textwrap.dedent(
    """
    import json
    import struct

    import pytest

    OBJECT = {object!r}
    RUNS = {runs!r}

    @pytest.mark.parametrize("test", sorted(RUNS))
    def test_arms(bpf, lbr, test, tmp_path_factory):
        obj = bpf.load(OBJECT)
        prog = obj.programs["many_arms"]
        with lbr.trace(prog) as trace:
            for arm, times in RUNS[test].items():
                for _ in range(times):
                    prog.run(data=bytes([int(arm)]) + bytes(63))
        assert trace.called("bpf_get_prandom_u32", by="many_arms")
        (bss,) = [m for m in obj.maps if m.endswith(".bss")]
        (value,) = [v for _, v in obj.maps[bss].items()]
        with open({counts!r}, "a") as f:
            f.write(json.dumps([test, struct.unpack_from("<25Q", value)]) + "\\n")
    """
)


@pytest.mark.slow
def test_exact_counts_equal_the_programs_own(pytester: pytest.Pytester) -> None:
    counts = pytester.path / "counts.jsonl"
    runs = {t: {str(a): n for a, n in arms.items()} for t, arms in RUNS.items()}
    pytester.makepyfile(
        test_arms=INNER.format(object=str(bpf_object("many_arms")), runs=runs, counts=str(counts))
    )
    result = pytester.runpytest_subprocess(
        *PYTEST_QUIET,
        "--lbr",
        "--lbr-cov-exact",
        f"--lbr-cov-report=lcov:{pytester.path / 'cov.info'}",
        f"--lbr-cov-report=cobertura:{pytester.path / 'cov.xml'}",
    )
    result.assert_outcomes(passed=2)
    assert "runs without counters" not in result.stdout.str()
    kernel = {test: counts for test, counts in map(json.loads, counts.read_text().splitlines())}
    assert {t: [c[a] for a in RUNS[t]] for t, c in kernel.items()} == {
        t: list(arms.values()) for t, arms in RUNS.items()
    }
    info = (pytester.path / "cov.info").read_text()
    sets = info.split("TN:")[1:]
    assert len(sets) == 3  # the code without runs, then one set per test
    by_arm = arm_lines()
    for test, counts in kernel.items():
        (text,) = [s for s in sets if re.match(rf"\S*{test}\S*\n", s)]
        da = {int(ln): int(n) for ln, n in records(text, "DA")}
        for arm, lines in by_arm.items():
            for ln in lines & set(da):
                assert da[ln] == counts[arm], f"{test}: line {ln} of arm {arm}"
        assert {a for a, lines in by_arm.items() if any(da.get(ln) for ln in lines)} == set(
            RUNS[test]
        )
        brda = records(text, "BRDA")
        assert brda and all((b[3] != "-") == bool(da.get(int(b[0]))) for b in brda)
        fn = {name: int(ln) for ln, name in records(text, "FN")}
        assert fn["account"] == declared("account") and fn["many_arms"] == declared("many_arms")
    cobertura = ET.parse(pytester.path / "cov.xml").getroot()
    hits = {int(line.get("number", 0)): int(line.get("hits", 0)) for line in cobertura.iter("line")}
    total = {arm: sum(c[arm] for c in kernel.values()) for arm in range(24)}
    for arm, lines in by_arm.items():
        assert all(hits[ln] == total[arm] for ln in lines & set(hits)), arm
