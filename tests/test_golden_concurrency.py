"""Concurrent `--lbr-golden-update` writes each golden file once and whole.

An inner suite of CASES golden tests each checks one trace with the
`lbr_golden` fixture. One plain `--lbr-golden-update` session records the
reference files. Then, from an empty __lbr_golden__, two `-n 4
--lbr-golden-update` sessions run at the same time on the same directory (eight
workers writing eight files): each session reports every file it wrote once, no
temporary file is left, every file parses and is exactly what the session alone
wrote (a torn or interleaved file would not be), and a run without update passes.

What is under test is the golden write path (xdist workers, the file system,
the atomic write), which is the same whatever made the trace, so this runs on
the host: the traces are built from the kernel's real vfs_write call paths
(write_null, write_full), one more callee per case so that every file differs.
In an emulated guest the workers' start-up would be most of the test's cost.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_lbr.golden.format import parse
from pytest_lbr.golden.storage import GOLDEN_DIR
from tests.commands import PYTEST_QUIET

pytest_plugins = ["pytester"]

CASES = 8
#: Functions vfs_write calls on its way (Linux 6.1 fs/read_write.c), one more per case.
INNER = textwrap.dedent(
    """
    import pytest

    from pytest_lbr.model import Branch, Hit, Location, Trace

    CALLEES = ["rw_verify_area", "__sb_start_write", "__fsnotify_parent",
               "fsnotify", "__sb_end_write", "inc_syscw", "add_wchar", "security_file_permission"]

    def loc(sym):
        return Location(0xFFFFFFFF81000000, sym, 0)

    @pytest.mark.parametrize("case", range(CASES))
    def test_write(lbr_golden, case):
        device = ("write_null", "write_full")[case % 2]
        branches = [Branch(loc("vfs_write"), loc(c), "call") for c in CALLEES[: case + 1]]
        branches.append(Branch(loc("vfs_write"), loc(device), "call"))
        hit = Hit("kfunc:vfs_write", branches=branches)
        lbr_golden(Trace(["kfunc:vfs_write"], "graph", [hit], kernel_release="6.1.0-56-amd64"))
    """
).replace("CASES", str(CASES))
UPDATE = (*PYTEST_QUIET, "-n", "4", "--lbr-golden-update")


def _written(out: str) -> list[str]:
    """The golden files a session's summary says it wrote."""
    lines = out.splitlines()
    start = next((i for i, ln in enumerate(lines) if "golden trace(s) written" in ln), None)
    if start is None:
        return []
    return [ln.strip() for ln in lines[start + 1 :] if ln.startswith("  ") and ln.endswith(".lbr")]


def _golden_files(root: Path) -> dict[str, str]:
    """Every file under __lbr_golden__ (temporary ones too): relative path -> text."""
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def _check_whole(files: dict[str, str]) -> None:
    assert len(files) == CASES, sorted(files)
    assert all(Path(n).suffix == ".lbr" and not Path(n).name.startswith(".") for n in files), (
        f"temporary files left: {sorted(files)}"
    )
    for name, text in files.items():
        assert parse(text, name).lines, f"{name} has no edge lines:\n{text}"


def test_concurrent_golden_update_writes_whole_files(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_inner=INNER)
    root = pytester.path / GOLDEN_DIR

    first = pytester.runpytest_subprocess(*PYTEST_QUIET, "--lbr-golden-update")
    first.assert_outcomes(passed=CASES)
    written = _written(first.stdout.str())
    assert len(written) == len(set(written)) == CASES, first.stdout.str()
    reference = _golden_files(root)
    _check_whole(reference)
    assert len(set(reference.values())) == CASES  # eight different files
    assert any("-> write_null" in t for t in reference.values()), reference
    assert any("-> write_full" in t for t in reference.values()), reference

    # Two sessions, eight workers, one directory, started together.
    shutil.rmtree(root)
    cmd = [sys.executable, "-m", "pytest", *UPDATE]
    procs = [
        subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    outs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            outs.append(out.decode(errors="replace"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out
    both = [_written(out) for out in outs]
    assert all(len(names) == len(set(names)) for names in both), both  # once per session
    # Every file written by one session at least (the other may have found it there, equal).
    assert {n for names in both for n in names} == set(written), outs
    after = _golden_files(root)
    _check_whole(after)
    assert after == reference
    checked = pytester.runpytest_subprocess(*PYTEST_QUIET)
    checked.assert_outcomes(passed=CASES)
    assert _written(checked.stdout.str()) == []
