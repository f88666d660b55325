"""The LBR probe's one-line reasons that no machine here can produce for real.

Too old a libbpf or clang, and an LBR held by another perf user: the version
checks run on the versions really installed (they must pass) and on old version
numbers (they must give the line); EBUSY is injected at the perf_event_open
wrapper, the one boundary, because no machine here has LBR to be busy.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from pytest_lbr.bpf.libbpf import MIN_LIBBPF, libbpf_version, libbpf_version_problem
from pytest_lbr.capture.hooks import tracer_object
from pytest_lbr.capture.lbr.backend import branch_events_problem
from pytest_lbr.kernel import perf


def test_installed_libbpf_is_new_enough() -> None:
    version = libbpf_version()
    assert version is not None and version >= MIN_LIBBPF
    assert libbpf_version_problem(version) == ""


@pytest.mark.parametrize(
    ("version", "have"), [((0, 8), "0.8"), ((0, 6), "0.6"), (None, "older than 0.6")]
)
def test_old_libbpf_is_one_line(version: tuple[int, int] | None, have: str) -> None:
    line = libbpf_version_problem(version)
    assert line == (
        f"libbpf {have} is too old: pytest-lbr needs libbpf >= 1.0 "
        "(Debian 12: apt-get install libbpf1; elsewhere build libbpf from source)"
    )


def test_installed_clang_is_new_enough() -> None:
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (run bash ci/setup)")
    version = tracer_object.clang_version()
    assert version is not None and version[0] >= tracer_object.MIN_CLANG
    assert tracer_object.clang_version_problem(version) == ""


@pytest.mark.parametrize(("version", "have"), [((10, 0, 1), "10.0.1"), ((3, 9, 0), "3.9.0")])
def test_old_clang_is_one_line(version: tuple[int, int, int], have: str) -> None:
    assert tracer_object.clang_version_problem(version) == (
        f"clang {have} is too old to build the LBR tracer: pytest-lbr needs clang >= 11 "
        "(apt-get install clang-14, then make -C bpf CLANG=clang-14)"
    )


def test_missing_clang_is_one_line() -> None:
    assert tracer_object.clang_version_problem(None) == (
        "clang is not installed: it builds the LBR tracer (apt-get install clang)"
    )


def test_tracer_not_built_names_clang_only_when_it_is_the_problem(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = "/x/pytest_lbr/objects/lbr_tracer.riscv64.bpf.o"
    base = (
        f"LBR tracer object missing from this install: {missing} "
        "(reinstall pytest-lbr; in a source tree run: make -C bpf)"
    )
    if shutil.which("clang") is not None:
        assert tracer_object.tracer_not_built(missing) == base
    # An old clang first on PATH: a script answering --version as clang 10 does.
    fake = tmp_path / "clang"
    fake.write_text("#!/bin/sh\necho 'Ubuntu clang version 10.0.0-4ubuntu1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    assert tracer_object.clang_version() == (10, 0, 0)
    assert tracer_object.tracer_not_built(
        missing
    ) == base + "; " + tracer_object.clang_version_problem((10, 0, 0))
    # No clang on PATH at all.
    fake.unlink()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tracer_object.clang_version() is None
    assert tracer_object.tracer_not_built(
        missing
    ) == base + "; " + tracer_object.clang_version_problem(None)


def test_busy_lbr_is_one_actionable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # No machine here has LBR, so nothing can hold it: the perf_event_open
    # syscall wrapper answers EBUSY as the kernel does when Intel PT or BTS
    # holds the LBR. Everything above the wrapper runs unchanged.
    calls: list[int] = []

    def busy(attr: perf.perf_event_attr, pid: int, cpu: int, group_fd: int = -1) -> int:
        calls.append(cpu)
        raise OSError(errno.EBUSY, f"perf_event_open: {errno.errorcode[errno.EBUSY]}")

    monkeypatch.setattr(perf, "perf_event_open", busy)
    with pytest.raises(OSError) as info:
        perf.open_branch_events("any")
    assert calls == perf.online_cpus()[:1]
    line = branch_events_problem(info.value)
    assert line.startswith(
        "the LBR is in use by another perf user or a hypervisor: "
        "perf_event_open(branch stack) failed with EBUSY ("
    )
    assert line.endswith("; stop that user and retry") and "\n" not in line


@pytest.mark.parametrize(
    ("err", "start"),
    [
        (errno.ENOENT, "no PMU: perf_event_open(PERF_TYPE_HARDWARE, cycles, branch stack)"),
        (errno.EOPNOTSUPP, "the PMU has no LBR: perf_event_open(branch stack) failed with"),
        (errno.EACCES, "perf_event_open(branch stack) failed: [Errno 13]"),
    ],
)
def test_other_perf_errors_keep_their_lines(err: int, start: str) -> None:
    assert branch_events_problem(OSError(err, "perf_event_open")).startswith(start)
