"""The VM runner, from the host: dry run, exit status propagation, boot failures.

The boot tests start real virtme-ng guests (about a minute under TCG each)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_lbr.vm import VmError, resolve_kernel, summarize_junit

REPO = Path(__file__).resolve().parent.parent
RUN = [str(REPO / "ci" / "qemu" / "run")]


def _kernel_or_skip(series: str) -> Path:
    try:
        return resolve_kernel(series)
    except VmError as exc:
        pytest.skip(str(exc))


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=timeout)


def test_dry_run_prints_the_full_command(tmp_path: Path) -> None:
    kernel = _kernel_or_skip("6.12")
    out = _run(
        "--kernel", "6.12", "--tcg", "--results", str(tmp_path), "--dry-run", "--", "-k", "x"
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith(str(REPO / ".venv" / "bin" / "vng")) or " --run " in line
    assert f"--run {kernel}" in line
    assert "--disable-kvm" in line and f"--rwdir {tmp_path}" in line
    assert "pytest_lbr.vm guest" in line and "-k x" in line


def test_unknown_kernel_is_one_clear_line() -> None:
    out = _run("--kernel", "/nonexistent/vmlinuz", "--dry-run")
    assert out.returncode == 3
    assert out.stderr.strip() == "[vm] error: kernel image '/nonexistent/vmlinuz' does not exist"


def test_summarize_junit_splits_kernel_tests(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.kernel.test_a" name="t1"/>'
        '<testcase classname="tests.kernel.test_a" name="t2"><skipped/></testcase>'
        '<testcase classname="tests.kernel.test_b" name="t3"><failure/></testcase>'
        '<testcase classname="tests.test_model" name="t4"/>'
        "</testsuite></testsuites>"
    )
    s = summarize_junit(junit)
    assert (s.kernel_ran, s.kernel_skipped, s.kernel_failed, s.other_ran) == (1, 1, 1, 1)


def test_non_kernel_image_fails_fast_with_a_message(tmp_path: Path) -> None:
    bogus = tmp_path / "vmlinuz-bogus"
    bogus.write_bytes(b"\x7fELF not really a kernel" * 100)
    start = time.monotonic()
    out = _run(
        "--kernel",
        str(bogus),
        "--tcg",
        "--results",
        str(tmp_path / "r"),
        "--boot-timeout",
        "60",
        "--",
        "-q",
    )
    assert out.returncode == 3
    assert "failed to boot" in out.stderr or "did not boot" in out.stderr, out.stderr
    assert time.monotonic() - start < 120


def test_hung_boot_is_killed_within_the_boot_timeout(tmp_path: Path) -> None:
    _kernel_or_skip("6.1")
    start = time.monotonic()
    out = _run(
        "--kernel", "6.1", "--tcg", "--results", str(tmp_path), "--boot-timeout", "3", "--", "-q"
    )
    assert out.returncode == 3
    assert "guest did not boot within 3s" in out.stderr, out.stderr
    assert time.monotonic() - start < 60


def test_guest_exit_status_is_pytests(tmp_path: Path) -> None:
    _kernel_or_skip("6.1")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_guest.py").write_text(
        "import os\n"
        "def test_root_in_guest():\n    assert os.geteuid() == 0 and os.environ['PYTEST_LBR_GUEST'] == '1'\n"
        "def test_fails():\n    assert 1 == 2\n"
    )
    out = _run(
        "--kernel",
        "6.1",
        "--tcg",
        "--results",
        str(tmp_path / "r"),
        "--",
        str(suite),
        "-q",
        "--rootdir",
        str(suite),
        timeout=900,
    )
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr
    assert "1 failed, 1 passed" in out.stdout
    assert (tmp_path / "r" / "dmesg.txt").stat().st_size > 0
    assert (tmp_path / "r" / "junit.xml").exists()


def test_busy_results_dir_is_not_shared(tmp_path: Path) -> None:
    from pytest_lbr.vm import claim_results_dir

    first = claim_results_dir(tmp_path / "r")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from pytest_lbr.vm import claim_results_dir as c; from pathlib import Path; print(c(Path({str(first)!r}))); import time; time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        other = Path(holder.stdout.readline().strip())
        assert other == tmp_path / "r.2"
    finally:
        holder.kill()
