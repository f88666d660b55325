"""The plugin's guest mode, from a user's pytest run (pytester): kernel tests, strictness,
shards and the tally `pytest-lbr vm` prints. The guest is told by the environment the
VM runner sets (PYTEST_LBR_GUEST=1), so these run on the host; tests/test_vm.py and
tests/test_adoption.py run the same inside real guests."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_lbr.guest_mode import Tally, read_tally

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.kernel
def test_kernel_passes():
    pass

@pytest.mark.kernel
def test_kernel_skips():
    pytest.skip("no kprobe.multi on this kernel")

@pytest.mark.kernel
@pytest.mark.allow_skip
def test_kernel_may_skip():
    pytest.skip("no debug vmlinux for this kernel")

def test_plain_skips():
    pytest.skip("not a kernel test")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_outside_a_guest_kernel_tests_skip_with_the_command_that_runs_them(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_LBR_GUEST", raising=False)
    result = suite.runpytest("-rs", "-W", "error::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(
        [
            "*kernel test: needs root and a tracing kernel; run it in a guest (pytest-lbr vm --kernel 6.12 -- PYTEST ARGS) or pass --lbr-run-kernel-tests"
        ]
    )
    here = suite.runpytest("--lbr-run-kernel-tests")
    here.assert_outcomes(passed=1, skipped=3)  # outside a guest: not strict


def test_inside_a_guest_a_kernel_test_that_skips_fails(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_LBR_GUEST", "1")
    result = suite.runpytest("-rA")
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*kernel test skipped inside the guest: *no kprobe.multi on this kernel "
            "(mark it allow_skip if this kernel may lack it; --no-strict turns this off)*",
            "FAILED test_suite.py::test_kernel_skips*",
        ]
    )


@pytest.mark.parametrize("how", ["env", "ini"])
def test_strict_mode_can_be_turned_off(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("PYTEST_LBR_GUEST", "1")
    if how == "env":  # what `pytest-lbr vm --no-strict` sets
        monkeypatch.setenv("PYTEST_LBR_STRICT", "0")
    else:
        suite.makeini("[pytest]\nlbr_strict = false\n")
    suite.runpytest().assert_outcomes(passed=1, skipped=3)


def test_the_tally_counts_every_test_once_and_kernel_tests_that_ran(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("PYTEST_LBR_GUEST", "1")
    monkeypatch.setenv("PYTEST_LBR_RESULTS", str(results))
    suite.makepyfile(
        test_teardown="""
import pytest

@pytest.fixture
def broken():
    yield
    raise RuntimeError("teardown fails")

@pytest.mark.kernel
def test_passes_then_teardown_fails(broken):
    pass
"""
    )
    # The guest's pytest writes the results file (pytest-lbr vm passes --lbr-results);
    # the tally is counted from its records.
    suite.runpytest_subprocess(f"--lbr-results={results / 'results.jsonl'}").assert_outcomes(
        passed=2, failed=1, skipped=2, errors=1
    )
    tally = asdict(read_tally(results) or Tally(-1))
    assert tally == {
        "passed": 1,
        "failed": 2,  # the strict skip, and the test whose teardown failed
        "skipped": 2,
        "kernel_ran": 3,
        "kernel_skipped": 1,
        "traced": 0,  # no test here used the lbr fixture (the guest test counts one)
    }


def test_shards_split_the_suite_without_overlap(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_many="\n".join(f"def test_{i}(): pass" for i in range(7)))
    seen: list[str] = []
    for i in (1, 2, 3):
        # Each runner shuffled with its own seed (pytest-randomly, a test extra), as a
        # CI matrix of runners would be: the shards still split the suite.
        shuffled = ("-p", "randomly", f"--randomly-seed={i}")
        result = suite.runpytest("test_many.py", f"--lbr-shard={i}/3", "-v", *shuffled)
        seen += [ln.split()[0] for ln in result.outlines if ln.startswith("test_many.py::")]
    assert sorted(seen) == sorted(f"test_many.py::test_{i}" for i in range(7))
    bad = suite.runpytest("--lbr-shard=0/3")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--shard '0/3': I must be between 1 and N*"])
