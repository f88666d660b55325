"""The `pytest-lbr` command line on the host: usage errors, `diff` of two golden
files, `doctor` with the host's real answers. The guests run tests/kernel/test_cli_kernel.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_lbr.cli import doctor_checks, main
from pytest_lbr.golden import serialize
from pytest_lbr.model import Trace

#: The installed console script (not `python -m`, which would import the checkout).
PYTEST_LBR = str(Path(sys.executable).parent / "pytest-lbr")

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed console script's module, as a user runs it."""
    return subprocess.run([PYTEST_LBR, *argv], capture_output=True, text=True, timeout=120)


def golden_file(path: Path, lines: list[str], kernel: str) -> Path:
    trace = Trace(backend="graph", kernel_release=kernel, arch="x86_64")
    path.write_text(serialize(trace, lines, "function"))
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required"),
        (["trace"], "the following arguments are required: TARGET"),
        (["trace", "foo:bar"], "bad target 'foo:bar': unknown kind 'foo'"),
        (["trace", "kfunc:vfs_write", "--count", "0"], "argument --count: must be > 0"),
        (["trace", "kfunc:x", "--count", "1", "--duration", "2"], "not allowed with argument"),
        (["trace", "kfunc:x", "--backend", "fast"], "argument --backend: invalid choice"),
        (["diff", "/nonexistent/a.lbr", "/nonexistent/b.lbr"], "cannot read /nonexistent/a.lbr"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], message: str) -> None:
    res = run(*argv)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pytest-lbr: error: ")
    assert message in lines[0]


def test_diff_shows_the_unified_diff_and_first_divergence(tmp_path: Path) -> None:
    a = golden_file(
        tmp_path / "test_cpu_stamp.lbr",
        [
            "hit prog:name:cpu_stamp",
            "cpu_stamp -> bpf_get_smp_processor_id",
            "cpu_stamp -> array_map_lookup_elem",
        ],
        "6.1.0-56-amd64",
    )
    b = golden_file(
        tmp_path / "test_cpu_stamp@6.12.lbr",
        ["hit prog:name:cpu_stamp", "cpu_stamp -> array_map_lookup_elem"],
        "6.12.117+deb12-amd64",
    )
    res = run("diff", str(a), str(b))
    assert res.returncode == 1, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == "# kernel: 6.1.0-56-amd64 -> 6.12.117+deb12-amd64"
    assert f"--- {a}" in out and f"+++ {b}" in out
    assert "-cpu_stamp -> bpf_get_smp_processor_id" in out
    assert out[-1] == (
        "first divergence at edge 2: expected 'cpu_stamp -> bpf_get_smp_processor_id', "
        "got 'cpu_stamp -> array_map_lookup_elem'"
    )


def test_diff_of_identical_files_exits_0(tmp_path: Path) -> None:
    a = golden_file(tmp_path / "a.lbr", ["hit kfunc:vfs_write", "vfs_write -> write_null"], "6.1.0")
    assert run("diff", str(a), str(a)).stdout == "identical: 2 edge line(s)\n"
    assert run("diff", str(a), str(a)).returncode == 0


def test_diff_refuses_a_file_that_is_not_golden(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    res = run("diff", str(bad), str(bad))
    assert res.returncode == 2
    assert "not a pytest-lbr golden trace" in res.stderr


def test_main_returns_exit_codes_without_raising(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "kfunc:vfs_write", "--window", "-1"]) == 2
    assert "argument --window: must be > 0" in capsys.readouterr().err


def test_doctor_reports_the_hosts_real_reasons() -> None:
    checks = {c.name: c for c in doctor_checks()}
    assert list(checks) == [
        "root",
        "BTF",
        "fentry",
        "kprobe.multi",
        "PMU",
        "LBR",
        "tracefs",
        "debug vmlinux",
    ]
    assert checks["root"].ok == (os.geteuid() == 0)
    assert checks["BTF"].ok == os.path.exists("/sys/kernel/btf/vmlinux")
    assert checks["LBR"].ok == Path("/sys/bus/event_source/devices/cpu/caps/branches").exists()
    for check in checks.values():
        assert check.detail, check.name
        if not check.ok:  # every "no" says why and what to do
            assert check.fix, check.name
    if os.environ.get("PYTEST_LBR_GUEST") != "1":
        # MACHINE.md: the host kernel refuses fentry and has no PMU; say exactly that.
        if os.geteuid() == 0 and os.path.exists("/sys/kernel/btf/vmlinux"):
            assert not checks["fentry"].ok and "EPERM" in checks["fentry"].detail
        if not Path("/sys/bus/event_source/devices/cpu").exists() or not checks["PMU"].ok:
            assert "perf_event_open(cycles) failed" in checks["PMU"].detail


def test_doctor_output_has_the_line_shapes_docs_cli_md_shows() -> None:
    res = run("doctor")
    assert res.returncode in (0, 1), res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"pytest-lbr doctor: kernel \S+ \S+", lines[0])
    shape = re.compile(r"\[(ok|no)\] [A-Za-z. ]+: .+|     fix: .+|=> .+")
    assert all(shape.fullmatch(line) for line in lines[1:]), res.stdout
    assert lines[-1].startswith("=> ")
    # The documented sample has the same shapes.
    sample = DOCS.read_text().split("<!-- doctor-sample -->")[1].split("```")[1].splitlines()[1:]
    assert re.fullmatch(r"pytest-lbr doctor: kernel \S+ \S+", sample[0])
    assert all(shape.fullmatch(line) for line in sample[1:] if line), sample


@pytest.mark.parametrize(
    "doc, marker", [("cli.md", "<!-- diff-sample -->"), ("bisect.md", "<!-- bisect-diff -->")]
)
def test_documented_golden_diff_is_what_the_command_prints(doc: str, marker: str) -> None:
    """The docs quote `pytest-lbr diff` on the committed cpu_stamp golden files verbatim."""
    block = (DOCS.parent / doc).read_text().split(marker)[1].split("```")[1].strip("\n")
    command, *expected = block.splitlines()
    argv = command.removeprefix("$ pytest-lbr ").split()
    repo = DOCS.parent.parent
    res = subprocess.run([PYTEST_LBR, *argv], capture_output=True, text=True, cwd=repo)
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines() == expected
    # The founding example: the 6.1 trace calls the helper, the 6.12 one does not.
    assert "-cpu_stamp -> bpf_get_smp_processor_id" in expected
