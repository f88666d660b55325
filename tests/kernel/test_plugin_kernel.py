"""The plugin end to end in a guest: real traces of write(2) to /dev/null (graph backend).

A write to /dev/null goes ksys_write -> vfs_write -> write_null; to /dev/full it goes
vfs_write -> write_full. The inner suite traces `kfunc:vfs_write` around os.write
and keeps a golden trace; switching the device is "changing the traced code path".
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.commands import PYTEST_QUIET

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

#: How often the golden test is re-run to show it is stable (20 runs).
RUNS = int(os.environ.get("PYTEST_LBR_STABILITY_RUNS", "20"))

INNER = textwrap.dedent(
    """
    import os
    import pytest
    from program import DEVICE

    def write_once():
        fd = os.open(DEVICE, os.O_WRONLY)
        try:
            os.write(fd, b"x")
        except OSError:
            pass  # /dev/full: ENOSPC, after write_full ran
        finally:
            os.close(fd)

    @pytest.mark.lbr("kfunc:vfs_write", golden=True)
    def test_marker():
        write_once()

    def test_fixture(lbr):
        with lbr.trace("kfunc:vfs_write") as trace:
            write_once()
        assert trace.called("write_*", by="vfs_write")
        lbr.check_golden(trace)
    """
)
ARGS = (*PYTEST_QUIET, "--lbr", "--lbr-backend=graph", "--lbr-require")


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_write=INNER, program='DEVICE = "/dev/null"\n')
    pytester.syspathinsert()
    return pytester


def golden(pytester: pytest.Pytester, name: str) -> Path:
    return pytester.path / "__lbr_golden__" / "test_write" / f"{name}.lbr"


@pytest.mark.slow
@pytest.mark.one_kernel("6.1")
def test_golden_update_check_and_change(suite: pytest.Pytester) -> None:
    written = suite.runpytest(*ARGS, "--lbr-golden-update", "--lbr-report=rep", "-k", "marker")
    written.assert_outcomes(passed=1, deselected=1)
    written.stdout.fnmatch_lines(["*lbr: 1 golden trace(s) written*"])
    text = golden(suite, "test_marker").read_text()
    assert "vfs_write -> write_null" in text, text
    assert "# backend: graph" in text
    assert "<svg" in (suite.path / "rep" / "index.html").read_text()
    suite.runpytest(*ARGS, "-k", "marker").assert_outcomes(passed=1, deselected=1)

    # Change the code path: the golden test fails naming the new call, update fixes it.
    suite.makepyfile(program='DEVICE = "/dev/full"\n')
    changed = suite.runpytest(*ARGS, "-k", "marker")
    changed.assert_outcomes(failed=1, deselected=1)
    assert changed.ret == 1
    changed.stdout.fnmatch_lines(["*golden trace mismatch*", "*+vfs_write -> write_full*"])
    suite.runpytest(*ARGS, "--lbr-golden-update", "-k", "marker").assert_outcomes(
        passed=1, deselected=1
    )


#: Traces per session in the stability test: the plugin arms the graph backend once per
#: session, as users get it, so runs of one session and runs of separate sessions both
#: count (a session's dearest part is turning the function tracer on and off).
PER_SESSION = 10

STABLE = textwrap.dedent(
    f"""
    import pytest
    from test_write import write_once

    @pytest.mark.parametrize("run", range({PER_SESSION}))
    def test_stable(lbr, run):
        with lbr.trace("kfunc:vfs_write") as trace:
            write_once()
        lbr.check_golden(trace)
    """
)


@pytest.mark.slow
@pytest.mark.one_kernel("6.12")
def test_golden_is_stable_over_runs(suite: pytest.Pytester) -> None:
    """RUNS traces of the same code, PER_SESSION to a session: noise must never make
    two differ (the golden files written from one session's traces are identical, and
    every later trace matches them)."""
    suite.makepyfile(test_stable=STABLE)
    suite.runpytest(*ARGS, "--lbr-golden-update", "test_stable.py").assert_outcomes(
        passed=PER_SESSION
    )
    files = sorted((suite.path / "__lbr_golden__" / "test_stable").glob("*.lbr"))
    assert len(files) == PER_SESSION, files
    texts = {f.name: f.read_text() for f in files}
    assert len(set(texts.values())) == 1, texts
    failures = []
    for i in range(max(1, RUNS // PER_SESSION)):
        result = suite.runpytest(*ARGS, "test_stable.py")
        if result.ret != 0:
            failures.append((i, result.stdout.str()[-3000:]))
    assert not failures, f"{len(failures)} sessions differed; first: {failures[0]}"


@pytest.mark.slow
@pytest.mark.one_kernel("6.1")
def test_xdist_two_workers(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    first = suite.runpytest_subprocess(*ARGS, "-n", "2", "--lbr-golden-update")
    first.assert_outcomes(passed=2)
    assert first.stdout.str().count("golden trace(s) written") == 1
    suite.runpytest_subprocess(*ARGS, "-n", "2").assert_outcomes(passed=2)


@pytest.mark.slow
@pytest.mark.one_kernel("6.1")
def test_git_bisect_finds_the_commit_that_changed_the_path(suite: pytest.Pytester) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=suite.path, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout

    git("init", "-q")
    devices = ["/dev/null"] * 2 + ["/dev/full"] * 3
    for i, device in enumerate(devices):
        (suite.path / "program.py").write_text(f"DEVICE = {device!r}  # v{i}\n")
        if i == 0:
            suite.runpytest(*ARGS, "--lbr-golden-update").assert_outcomes(passed=2)
            git("add", "program.py", "test_write.py", "__lbr_golden__")
        git("commit", "-qam", f"v{i}")
    first_bad = git("rev-list", "-1", "--grep=^v2$", "HEAD").strip()
    git("bisect", "start", "HEAD", "HEAD~4")
    out = git("bisect", "run", sys.executable, "-m", "pytest", *ARGS, "-q", "test_write.py")
    assert f"{first_bad} is the first bad commit" in out, out
