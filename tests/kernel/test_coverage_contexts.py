"""`--lbr-cov` keeps which test ran each line (issue 51): an inner suite of two tests,
each running other arms of tests/bpf/many_arms.bpf.c (an arm counts its runs in
`.bss`, so the arms that ran are the kernel's word), then the session's coverage
record, LCOV file and HTML report, read back."""

from __future__ import annotations

import re
import textwrap

import pytest

from pytest_lbr.results import read_results
from tests.bpf.objects import bpf_object
from tests.commands import PYTEST_QUIET
from tests.kernel.test_coverage_truth import arm_lines

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

#: Test -> the arms it runs (the calling arms 8 and 9: the graph backend proves
#: their lines in every run).
ARMS = {"test_eight": (8,), "test_nine_and_eight": (9, 8)}

INNER = textwrap.dedent(
    """
    import struct

    OBJECT = {object!r}

    def run(bpf, lbr, arms):
        obj = bpf.load(OBJECT)
        prog = obj.programs["many_arms"]
        with lbr.trace(prog):
            for arm in arms:
                prog.run(data=bytes([arm]) + bytes(63))
        (bss,) = [m for m in obj.maps if m.endswith(".bss")]
        (value,) = [v for _, v in obj.maps[bss].items()]
        counts = struct.unpack_from("<24Q", value)
        assert {{a for a, c in enumerate(counts) if c}} == set(arms)

    def test_eight(bpf, lbr):
        run(bpf, lbr, (8,))

    def test_nine_and_eight(bpf, lbr):
        run(bpf, lbr, (9, 8))
    """
)


@pytest.mark.slow
def test_each_line_names_the_tests_that_ran_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_arms=INNER.format(object=str(bpf_object("many_arms"))))
    results = pytester.path / "results.jsonl"
    result = pytester.runpytest_subprocess(
        *PYTEST_QUIET,
        "--lbr",
        "--lbr-cov",
        f"--lbr-results={results}",
        f"--lbr-report={pytester.path / 'report'}",
        f"--lbr-cov-report=lcov:{pytester.path / 'cov.info'}",
    )
    result.assert_outcomes(passed=2)
    (record,) = [r for r in read_results(results).coverage if r.program == "many_arms"]
    assert record.contexts is not None
    tests = {t.rsplit("::", 1)[1]: ctx for t, ctx in record.contexts.items()}
    assert set(tests) == set(ARMS)
    assert {t: ctx["runs"] for t, ctx in tests.items()} == {t: len(a) for t, a in ARMS.items()}
    by_arm = arm_lines()
    for test, ctx in tests.items():
        ran = {ln for _, ln, n, _ in ctx["lines"] if n}
        for arm, lines in by_arm.items():
            if arm not in ARMS[test]:
                assert not ran & lines, f"{test} claims line(s) {ran & lines} of arm {arm}"
        assert ran & by_arm[8], f"{test}: arm 8's call proves none of its lines"
    assert {ln for _, ln, n, _ in tests["test_nine_and_eight"]["lines"] if n} & by_arm[9]
    # LCOV: one test name per test, after the program's code without runs.
    info = (pytester.path / "cov.info").read_text()
    names = [r[3:] for r in info.splitlines() if r.startswith("TN:")]
    assert names[0] == "" and len(names) == 3
    assert all(
        re.search(rf"_{t}$", n) for t, n in zip(sorted(ARMS), sorted(names[1:]), strict=True)
    )
    # The HTML report: arm 9's lines name one test, arm 8's both.
    page = (pytester.path / "report" / "index.html").read_text()
    nine = min(by_arm[9] & {ln for _, ln, n, _ in tests["test_nine_and_eight"]["lines"] if n})
    row = next(r for r in page.split("<tr") if f'<td class="n">{nine}</td>' in r)
    assert "1 test(s)" in row and "test_nine_and_eight" in row
