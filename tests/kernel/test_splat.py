"""Kernel splats are failures: a real kernel warning fails the test it happened in (its
report and the HTML report show it), and one outside any test fails the run.

The warning comes from tests/kmod/splat.c (ci/setup builds it: make -C tests/kmod):
each write to /sys/kernel/debug/pytest_lbr_splat runs WARN(). Loading it taints the
kernel (an out-of-tree, unsigned module, then the warning itself): fine in a guest
that lives for one run, which is where these tests run. They are marked
`allow_splat`: the warnings they provoke are the inner sessions' to report, not
failures of this suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.commands import PYTEST_QUIET

pytestmark = [pytest.mark.kernel, pytest.mark.allow_splat]
pytest_plugins = ["pytester"]

RELEASE = os.uname().release
MODULE = Path(__file__).resolve().parents[1] / "kmod" / "build" / RELEASE / "splat.ko"
MESSAGE = "pytest-lbr test: a warning provoked on purpose"
ARGS = (*PYTEST_QUIET, "--lbr", "--lbr-kernel-splats=fail")

INNER = textwrap.dedent(
    """
    def warn():
        with open("/sys/kernel/debug/pytest_lbr_splat", "w") as trigger:
            trigger.write("1")

    def test_warns():
        warn()

    def test_quiet():
        pass
    """
)


@pytest.fixture(scope="module")
def warning_module() -> Iterator[None]:
    """splat.ko loaded for the running kernel; unloaded after the module's tests."""
    if not MODULE.is_file():
        pytest.skip(
            f"{MODULE} is not built: run make -C tests/kmod (needs linux-headers-{RELEASE})"
        )
    loaded = subprocess.run(["insmod", str(MODULE)], capture_output=True, text=True)
    if loaded.returncode != 0 and "File exists" not in loaded.stderr:
        pytest.fail(f"insmod {MODULE}: {loaded.stderr.strip()}", pytrace=False)
    try:
        yield
    finally:
        subprocess.run(["rmmod", "splat"], capture_output=True, check=False)


def test_a_warning_fails_the_test_it_happened_in(
    pytester: pytest.Pytester, warning_module: None
) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest(*ARGS, "--lbr-report=rep", "-rf")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The inner session runs in this process: the kernel names this process's PID.
    result.stdout.fnmatch_lines(
        [
            "*_ test_warns _*",
            f"kernel splat during this test: WARNING: CPU: * PID: {os.getpid()} at *"
            f"splat_write+* [[]splat[]] ({MESSAGE})",
            "*- kernel splat -*",
            "*[[] cut here []]*",
            MESSAGE,
            f"WARNING: CPU: * PID: {os.getpid()} at *splat.c:* splat_write+*",
            "Call Trace:",
            "*---[[] end trace *",
            "FAILED test_inner.py::test_warns - kernel splat during this test: WARNING: *",
        ]
    )
    assert "FAILED test_inner.py::test_quiet" not in result.stdout.str()
    html = (pytester.path / "rep" / "index.html").read_text()
    assert "1 with a kernel splat" in html
    assert MESSAGE in html and "splat_write+" in html
    text = (pytester.path / "rep" / "test_inner.py.test_warns.txt").read_text()
    assert text.startswith("# kernel splat\n------------[ cut here ]------------\n" + MESSAGE)


@pytest.mark.slow
def test_a_warning_outside_any_test_fails_the_run(
    pytester: pytest.Pytester, warning_module: None
) -> None:
    pytester.makepyfile(test_inner=INNER)
    pytester.makeconftest(
        """
        from test_inner import warn

        def pytest_sessionfinish(session):
            warn()  # after the last test: no test to blame
        """
    )
    pytester.syspathinsert()
    result = pytester.runpytest(*ARGS, "-k", "quiet")
    result.assert_outcomes(passed=1, deselected=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= lbr: kernel splat outside any test =*",
            "*[[] cut here []]*",
            MESSAGE,
            "WARNING: CPU: * at *splat_write+*",
            "lbr: 1 kernel splat(s) outside any test: the run fails "
            "(--lbr-kernel-splats=off turns the check off)",
        ]
    )
    quiet = pytester.runpytest(*PYTEST_QUIET, "--lbr", "--lbr-kernel-splats=off", "-k", "quiet")
    quiet.assert_outcomes(passed=1, deselected=1)
    assert quiet.ret == pytest.ExitCode.OK
    assert "kernel splat" not in quiet.stdout.str()


XDIST_INNER = textwrap.dedent(
    """
    import time

    import pytest
    from test_inner import warn

    def test_warns_while_the_other_worker_is_busy():
        time.sleep(0.5)
        warn()

    @pytest.mark.parametrize("n", range(3))
    def test_busy(n):
        time.sleep(1.5)
    """
)


@pytest.mark.slow
@pytest.mark.one_kernel("6.12")
def test_under_xdist_only_the_worker_that_warned_reports_it(
    pytester: pytest.Pytester, warning_module: None
) -> None:
    """Both workers read the same kernel log while their tests run side by side; the
    warning names the task that caused it, so only that worker's test fails, and the
    run reports it once."""
    pytester.makepyfile(test_inner=INNER, test_xdist=XDIST_INNER)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess(*ARGS, "-n", "2", "test_xdist.py", "-rf")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    sections = [line for line in out.splitlines() if re.fullmatch(r"-+ kernel splat -+", line)]
    assert len(sections) == 1, out
    assert "FAILED test_xdist.py::test_warns_while_the_other_worker_is_busy" in out
    assert "outside any test" not in out


ALLOWED_INNER = textwrap.dedent(
    """
    import pytest
    from test_inner import warn

    @pytest.mark.allow_splat
    def test_warns_on_purpose():
        warn()

    def test_warns():
        warn()
    """
)


def test_an_allowed_splat_is_recorded_and_summarised_as_allowed(
    pytester: pytest.Pytester, warning_module: None, tmp_path: Path
) -> None:
    """A real warning in an `allow_splat` test: its results record says allowed, and the
    summary `pytest-lbr vm` writes lists it apart, never as a failure; the warning in
    the unmarked test stays a failing splat."""
    from pytest_lbr.results import read_results, summary_markdown

    pytester.makepyfile(test_inner=INNER, test_allowed=ALLOWED_INNER)
    pytester.syspathinsert()
    path = tmp_path / "results.jsonl"
    result = pytester.runpytest(*ARGS, "test_allowed.py", f"--lbr-results={path}")
    result.assert_outcomes(passed=1, failed=1)
    res = read_results(path)
    outcomes = {t.nodeid: (t.outcome, [s.allowed for s in t.splats]) for t in res.tests}
    assert outcomes == {
        "test_allowed.py::test_warns_on_purpose": ("passed", [True]),
        "test_allowed.py::test_warns": ("failed", [False]),
    }
    text = summary_markdown({"guest": res})
    assert " | 1 (+1 allowed) |" in text
    kernel, allowed = text.split("### Kernel splats\n\n", 1)[1].split("### Allowed kernel", 1)
    assert "(in `test_allowed.py::test_warns`)" in kernel
    assert "test_warns_on_purpose" not in kernel
    assert "(in `test_allowed.py::test_warns_on_purpose`)" in allowed
