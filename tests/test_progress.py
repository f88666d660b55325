"""Library progress (a long DWARF read, a download) reaches the user only through
the front end: a line of pytest's output under --lbr, nothing otherwise."""

from __future__ import annotations

import pytest

from pytest_lbr.progress import set_progress

pytest_plugins = ["pytester"]

SLOW_STEP = """
from pytest_lbr.progress import progress

def test_slow_step():
    progress("reading DWARF of vmlinux: 10/20 addresses, 2 s")
"""


def test_progress_is_a_line_of_pytest_output_also_inside_a_captured_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(SLOW_STEP)
    # A subprocess: the real terminal, which fd capture redirects during a test.
    result = pytester.runpytest_subprocess("--lbr", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["lbr: reading DWARF of vmlinux: 10/20 addresses, 2 s"])


def test_a_session_reports_its_own_progress_and_puts_back_the_listener_before_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(SLOW_STEP)
    heard: list[str] = []
    previous = set_progress(heard.append)
    try:
        result = pytester.runpytest("--lbr", "-p", "no:cacheprovider")  # in this process
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["lbr: reading DWARF of vmlinux: 10/20 addresses, 2 s"])
        assert heard == []
    finally:
        assert set_progress(previous) == heard.append


def test_without_a_front_end_progress_is_silent(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SLOW_STEP)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")  # no --lbr, nothing captured
    result.assert_outcomes(passed=1)
    assert "reading DWARF" not in result.stdout.str() + result.stderr.str()
