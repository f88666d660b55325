"""`pytest-lbr vm` from the host: dry runs, kernel choice, exit statuses, boot failures.

The boot tests start real virtme-ng guests (slow without KVM). The
guest-side plugin behaviour (strict mode, shards, the tally) is in
tests/test_guest_mode.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_lbr import vm
from pytest_lbr.exit_codes import EXIT_CANNOT_TEST, EXIT_NO_GUEST
from pytest_lbr.guest_mode import read_tally
from pytest_lbr.results import guest_record
from pytest_lbr.vm import (
    VmError,
    bisect_status,
    resolve_kernel,
    worst_status,
)
from pytest_lbr.vm import plan as vm_plan
from pytest_lbr.vm import run as vm_run
from tests.commands import PYTEST_LBR

VM = [PYTEST_LBR, "vm"]
DATA = Path(__file__).parent / "data"

#: With `-n 2 --dist loadgroup` the tests that boot guests share one worker (pytest 8;
#: under pytest 9 xdist 3.8 no longer groups: at most one guest per worker, two at once).
pytestmark = pytest.mark.xdist_group("guests")


def _kernel_or_skip(series: str) -> Path:
    try:
        return resolve_kernel(series)
    except VmError as exc:
        pytest.skip(str(exc))


def _run(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VM, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_dry_run_prints_one_command_per_kernel_and_creates_nothing(tmp_path: Path) -> None:
    k61, k612 = _kernel_or_skip("6.1"), _kernel_or_skip("6.12")
    out = _run(
        "--kernel", "6.1", "--kernel", "6.12", "--tcg", "--dry-run", "--", "-k", "x", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    for line, kernel, label in ((lines[0], k61, "6.1"), (lines[1], k612, "6.12")):
        assert f"--run {kernel}" in line and "--disable-kvm" in line
        # results default to ./lbr-results/<kernel> of the caller; the guest starts in its cwd
        assert f"--rwdir {tmp_path / 'lbr-results' / label}" in line
        assert f"cd {tmp_path} && " in line
        assert "pytest_lbr.vm guest" in line and line.endswith("-- -k x'")
    assert list(tmp_path.iterdir()) == []  # --dry-run wrote nothing


def test_tcg_guests_get_two_vcpus_on_one_tcg_thread(tmp_path: Path) -> None:
    _kernel_or_skip("6.12")
    for extra, cpus in (((), "2"), (("--cpus", "1"), "1"), (("--cpus", "4"), "4")):
        out = _run("--kernel", "6.12", "--tcg", "--dry-run", *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        cmd = shlex.split(out.stdout)
        assert cmd[cmd.index("--cpus") + 1] == cpus
        # Round-robin TCG (two MTTCG vCPUs oopsed ftrace), as one word: vng's argparse
        # takes a separate value starting with "-" for an option and fails.
        assert "--qemu-opts=-accel tcg,thread=single" in cmd


def _plan(kvm: bool, label: str, cpus: int | None = None) -> vm.VmPlan:
    return vm.build_command(
        Path("/boot/vmlinuz-x"),
        Path("/r") / label,
        [],
        label=label,
        kvm=kvm,
        cpus=cpus,
        vng=Path("/bin/vng"),
    )


def test_kvm_guests_get_two_vcpus_and_lbr_passthrough_as_one_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vm_plan, "lbr_passthrough_opts", lambda: ([], "host CPU is not Intel"))
    plan = _plan(True, "6.12")
    assert plan.command[plan.command.index("--cpus") + 1] == "2"
    assert not [a for a in plan.command if a.startswith("--qemu-opts")]
    assert "--disable-kvm" not in plan.command and plan.host_cpus == 2
    lbr = (["-cpu", "host,pmu=on,lbr-fmt=0x5"], "LBR passthrough lbr-fmt=0x5")
    monkeypatch.setattr(vm_plan, "lbr_passthrough_opts", lambda: lbr)
    assert "--qemu-opts=-cpu host,pmu=on,lbr-fmt=0x5" in _plan(True, "6.12").command


@pytest.mark.parametrize(
    ("kvm", "cpus", "jobs"), [(False, None, 2), (False, 4, 2), (True, None, 1)]
)
def test_guests_at_once_count_host_threads_not_vcpus(
    monkeypatch: pytest.MonkeyPatch, kvm: bool, cpus: int | None, jobs: int
) -> None:
    """On 2 cores: TCG guests (one TCG thread each, whatever their vCPUs) side by side,
    KVM guests of two vCPUs one at a time."""
    monkeypatch.setattr(vm_plan, "lbr_passthrough_opts", lambda: ([], "no LBR"))
    monkeypatch.setattr(
        vm, "_plans", lambda args, _: [_plan(kvm, k, cpus) for k in ("6.1", "6.12")]
    )
    monkeypatch.setattr(vm, "_run_one", lambda p, args, _: vm.GuestResult(p.label, 0, p.results))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    workers: list[int] = []
    real = vm.concurrent.futures.ThreadPoolExecutor

    def pool(max_workers: int) -> concurrent.futures.ThreadPoolExecutor:
        workers.append(max_workers)
        return real(max_workers=max_workers)

    monkeypatch.setattr(vm.concurrent.futures, "ThreadPoolExecutor", pool)
    assert vm.main(["--kernel", "6.1", "--kernel", "6.12"]) == 0
    assert workers == [jobs]


def test_exec_runs_a_command_instead_of_pytest(tmp_path: Path) -> None:
    _kernel_or_skip("6.12")
    out = _run(
        "--kernel", "6.12", "--tcg", "--dry-run", "--exec", "pytest-lbr doctor", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    guest = shlex.split(out.stdout)[-1]  # what vng --exec runs in the guest
    assert guest.endswith("--exec 'pytest-lbr doctor' --"), guest
    both = _run("--kernel", "6.12", "--exec", "true", "--", "-q", cwd=tmp_path)
    assert both.returncode == 4
    assert "drop the pytest arguments" in both.stderr


def test_shard_is_passed_to_the_guest_pytest(tmp_path: Path) -> None:
    _kernel_or_skip("6.12")
    out = _run(
        "--kernel", "6.12", "--tcg", "--dry-run", "--shard", "2/3", "--", "tests", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("-- --lbr-shard=2/3 tests'")
    bad = _run("--kernel", "6.12", "--dry-run", "--shard", "4/3", cwd=tmp_path)
    assert bad.returncode == 2
    assert "error: argument --shard: I must be between 1 and N" in bad.stderr


def test_unknown_kernel_is_one_clear_line(tmp_path: Path) -> None:
    out = _run("--kernel", "/nonexistent/vmlinuz", "--dry-run", cwd=tmp_path)
    assert out.returncode == EXIT_NO_GUEST
    assert out.stderr.strip() == "[vm] error: kernel image '/nonexistent/vmlinuz' does not exist"
    series = _run("--kernel", "4.19", "--dry-run", cwd=tmp_path)
    assert series.returncode == EXIT_NO_GUEST
    assert series.stderr.strip().startswith(
        "[vm] error: no kernel 4.19 installed (/boot/vmlinuz-4.19.*): install one"
    )
    bisect = _run("--kernel", "4.19", "--bisect", "--dry-run", cwd=tmp_path)
    assert bisect.returncode == EXIT_CANNOT_TEST
    assert not (tmp_path / "lbr-results").exists()  # a dry run writes nothing
    # A run that cannot start its guest leaves it a record saying why, for machines.
    bisect = _run("--kernel", "4.19", "--bisect", "--results", "r", cwd=tmp_path)
    assert bisect.returncode == EXIT_CANNOT_TEST
    record = guest_record(tmp_path / "r" / "4.19")
    assert record is not None and (record.end, record.status) == ("not_started", None)
    assert record.error.startswith("no kernel 4.19 installed")


def test_a_pinned_release_boots_exactly_that_kernel_or_says_how_to_install_it(
    tmp_path: Path,
) -> None:
    """--kernel RELEASE (the name Debian's package carries) pins the image; a release
    not installed is one line naming the package to install and the pins that would do."""
    image = _kernel_or_skip("6.12")
    release = image.name.removeprefix("vmlinuz-")
    out = _run("--kernel", release, "--tcg", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"--run {image} " in out.stdout
    assert f"{tmp_path / 'lbr-results' / release}" in out.stdout  # its label: the release
    missing = _run("--kernel", "6.12.999+deb12-amd64", "--dry-run", cwd=tmp_path)
    assert missing.returncode == EXIT_NO_GUEST
    error = missing.stderr.strip()
    assert "\n" not in error, error
    assert error.startswith(
        "[vm] error: pinned kernel 6.12.999+deb12-amd64 is not installed "
        "(no /boot/vmlinuz-6.12.999+deb12-amd64): apt-get install linux-image-6.12.999+deb12-amd64"
    ), error
    assert "or pin one installed: " in error and release in error
    # A file named like a release is still a file, given with a slash.
    named = tmp_path / release
    named.write_bytes(image.read_bytes())
    out = _run("--kernel", f"./{release}", "--tcg", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0 and f"--run {named} " in out.stdout, out.stderr


def test_missing_tools_name_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(
        VmError, match=r"^virtme-ng is not installed: pip install 'pytest-lbr\[vm\]'$"
    ):
        vm.find_tools()
    for tool in ("vng", "busybox"):
        (bindir / tool).write_text("#!/bin/sh\n")
        (bindir / tool).chmod(0o755)
    with pytest.raises(
        VmError, match=r"^qemu-system-x86_64 is not installed: apt-get install qemu-system-x86"
    ):
        vm.find_tools()
    (bindir / "qemu-system-x86_64").write_text("#!/bin/sh\n")
    (bindir / "qemu-system-x86_64").chmod(0o755)
    (bindir / "busybox").unlink()
    with pytest.raises(VmError, match=r"^virtme-ng needs busybox: apt-get install busybox-static"):
        vm.find_tools()


def test_the_worst_status_wins_and_bisect_maps_the_rest_to_skip() -> None:
    assert worst_status([0, 0]) == 0
    assert worst_status([0, 5]) == 5
    assert worst_status([5, 1]) == 1
    assert worst_status([1, 3]) == 3
    assert worst_status([1, EXIT_NO_GUEST, 0]) == EXIT_NO_GUEST
    assert worst_status([]) == EXIT_NO_GUEST
    assert [bisect_status(s) for s in (0, 1, 2, 3, 4, 5, EXIT_NO_GUEST)] == [0, 1] + [125] * 5


@pytest.mark.slow
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
    assert out.returncode == EXIT_NO_GUEST
    assert "failed to boot" in out.stderr or "did not boot" in out.stderr, out.stderr
    assert "vmlinuz-bogus: no result:" in out.stderr
    assert "\x1b" not in out.stderr  # the console tail is quoted without escape codes
    assert time.monotonic() - start < 120
    record = guest_record(tmp_path / "r" / "vmlinuz-bogus")
    assert record is not None, "pytest-lbr vm wrote no guest record"
    assert (record.end, record.status, record.exit_status) == ("no_boot", None, EXIT_NO_GUEST)
    assert record.kernel == str(bogus) and record.error and record.release == ""
    # Under --bisect a kernel that does not boot is "cannot test" (125), never "bad".
    out = _run(
        "--kernel",
        str(bogus),
        "--tcg",
        "--bisect",
        "--results",
        str(tmp_path / "b"),
        "--boot-timeout",
        "60",
    )
    assert out.returncode == EXIT_CANNOT_TEST, out.stderr


def test_hung_boot_is_killed_within_the_boot_timeout(tmp_path: Path) -> None:
    _kernel_or_skip("6.1")
    start = time.monotonic()
    out = _run(
        "--kernel", "6.1", "--tcg", "--results", str(tmp_path), "--boot-timeout", "3", "--", "-q"
    )
    assert out.returncode == EXIT_NO_GUEST
    assert "guest did not boot within 3s" in out.stderr, out.stderr
    assert time.monotonic() - start < 60


GUEST_SUITE = """
import os

def test_root_in_guest_with_the_environment_given():
    assert os.geteuid() == 0 and os.environ["PYTEST_LBR_GUEST"] == "1"
    # --env NAME=VALUE, --env NAME (the host's value), and the host's PYTEST_* only
    assert os.environ["GIVEN"] == "a value with spaces, 'quotes' and = signs"
    assert os.environ["FROM_HOST"] == "from the host"
    assert os.environ["PYTEST_ADDOPTS"] == ADDOPTS
    assert "NOT_GIVEN" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ

def test_fails():
    assert 1 == 2

def test_traces_without_the_kernel_marker(lbr):
    # --lbr came from PYTEST_ADDOPTS: the tally counts this test as traced
    with lbr.trace("kfunc:vfs_write") as trace:
        with open("/dev/null", "w") as f:
            f.write("x")
    assert trace.hits

def test_deselected_by_addopts():
    raise AssertionError("PYTEST_ADDOPTS did not reach the guest")
"""


@pytest.mark.slow
def test_guest_runs_in_the_callers_directory_and_reports_pytests_status(tmp_path: Path) -> None:
    """One guest: pytest's status and node ids as on the host, the environment the
    guest gets (--env, PYTEST_ADDOPTS), and the summary line counting traced tests. The
    kernel is pinned to the 6.1 release installed (--kernel RELEASE), as CI pins it."""
    image = _kernel_or_skip("6.1")
    release = image.name.removeprefix("vmlinuz-")
    suite = tmp_path / "project"
    (suite / "tests").mkdir(parents=True)
    addopts = "--lbr --deselect tests/test_guest.py::test_deselected_by_addopts"
    (suite / "tests" / "test_guest.py").write_text(f"ADDOPTS = {addopts!r}\n{GUEST_SUITE}")
    env = {
        **os.environ,
        "PYTEST_ADDOPTS": addopts,
        "FROM_HOST": "from the host",
        "NOT_GIVEN": "stays on the host",
    }
    given = "GIVEN=a value with spaces, 'quotes' and = signs"
    out = subprocess.run(
        [*VM, "--kernel", release, "--tcg", "--env", given, "-e", "FROM_HOST", "-e", "UNSET_HERE"]
        + ["--", "tests", "-q", "-rA"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=suite,
        env=env,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    assert "1 failed, 2 passed, 1 deselected" in out.stdout
    # node ids as on the host: relative to the caller's directory
    assert "FAILED tests/test_guest.py::test_fails" in out.stdout
    assert "PASSED tests/test_guest.py::test_root_in_guest_with_the_environment_given" in out.stdout
    assert "[vm] --env UNSET_HERE: not set here, so not set in the guest" in out.stderr
    assert f"[vm] {release}: environment from here: FROM_HOST, GIVEN, PYTEST_ADDOPTS" in out.stderr
    results = suite / "lbr-results" / release
    assert (results / "dmesg.txt").stat().st_size > 0
    assert (results / "junit.xml").exists()
    assert not (results / vm.GUEST_ENV_FILE).exists()  # the guest read and deleted it
    tally = read_tally(results)
    assert tally is not None
    assert (tally.passed, tally.failed, tally.skipped, tally.traced) == (2, 1, 0, 1)
    record = guest_record(results)
    assert record is not None and (record.end, record.status, record.error) == ("reported", 1, "")
    assert (record.release, record.kernel) == (release, str(image))  # the pin booted
    # The run's summary, from the results records.
    summary = (suite / "lbr-results" / "summary.md").read_text()
    assert f"| {release} | 2 | 1 |" in summary
    assert "### FAILED `tests/test_guest.py::test_fails`" in summary
    assert (
        f"[vm] {release}: 2 passed, 1 failed, 0 skipped; ran with tracing: 1, ran marked "
        "kernel: 0 (exit 1;" in out.stderr
    )


def test_the_guest_gets_the_pytest_variables_and_env_options_only() -> None:
    host = {
        "HOME": "/root",
        "TOKEN": "secret",
        "MYFLAG": "1",
        "PYTEST_ADDOPTS": "-x",
        "PYTEST_PLUGINS": "myplugin",
        "PYTEST_LBR_FUZZ_EXAMPLES": "5",
        # pytest's and xdist's per-process state, and what the guest sets itself
        "PYTEST_CURRENT_TEST": "tests/test_vm.py::t (call)",
        "PYTEST_XDIST_WORKER": "gw0",
        "PYTEST_LBR_GUEST": "1",
        "PYTEST_LBR_RESULTS": "/somewhere",
    }
    wanted = [("MYFLAG", None), ("OTHER", "a b"), ("MISSING", None), ("PYTEST_ADDOPTS", "-q")]
    env, unset = vm.guest_environment(host, wanted)
    assert env == {
        "PYTEST_ADDOPTS": "-q",  # --env wins over the host's
        "PYTEST_PLUGINS": "myplugin",
        "PYTEST_LBR_FUZZ_EXAMPLES": "5",
        "MYFLAG": "1",
        "OTHER": "a b",
    }
    assert unset == ["MISSING"]
    assert vm.env_option("A=") == ("A", "") and vm.env_option("A") == ("A", None)


def test_a_bad_env_option_is_a_usage_error_and_values_stay_off_the_command_line(
    tmp_path: Path,
) -> None:
    _kernel_or_skip("6.12")
    bad = _run("--kernel", "6.12", "--dry-run", "--env", "1X=y", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().endswith(
        "error: argument --env/-e: expected NAME=VALUE or NAME (letters, digits, _)"
    ), bad.stderr
    out = _run("--kernel", "6.12", "--tcg", "--dry-run", "--env", "TOKEN=s3cret", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    # vng puts --exec on the kernel command line (short, and visible in the guest's
    # /proc/cmdline): values travel in a file of the results directory instead.
    assert "s3cret" not in out.stdout and "TOKEN" not in out.stdout


def test_kvm_failure_is_kvms_own_line_without_escape_codes() -> None:
    """Real QEMU output on this machine (-cpu qemu64 and -cpu host, 6.12 kernel,
    2026-11-26): the firmware's screen starts with escape codes, KVM's error is on
    stderr, and the probe was killed at its timeout."""
    console = (DATA / "kvm-probe-emulation-failure.console").read_bytes().decode()
    stderr = (DATA / "kvm-probe-emulation-failure.stderr").read_bytes().decode()
    assert console.startswith("\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS")  # what was quoted before
    reason = vm.kvm_failure(console, stderr, timed_out=20.0)
    assert reason == "KVM internal error. Suberror: 1 (emulation failure)"
    msr = (DATA / "kvm-probe-msr.stderr").read_bytes().decode()
    assert vm.kvm_failure("", msr) == "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69"
    assert vm.kvm_failure(console, "", timed_out=20.0) == "no kernel output within 20s"
    assert vm.kvm_failure(console, "") == "SeaBIOS (version 1.16.2-debian-1.16.2-1)"
    assert vm.kvm_failure("", "") == "QEMU exited without output"
    clean = vm.strip_escapes(console)
    assert "\x1b" not in clean and "\r" not in clean
    assert clean.startswith("SeaBIOS (version 1.16.2-debian-1.16.2-1)\n")
    assert "Booting from ROM..." in clean.splitlines()


def test_the_kvm_probe_here_names_the_error_it_met(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real probe on this machine, not from a cache: one line, no escape codes."""
    kernel = _kernel_or_skip("6.12")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    usable, why = vm.kvm_usable(kernel)
    assert "\n" not in why and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", why), repr(why)
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert (usable, why) == (False, "/dev/kvm missing or not accessible")
        return
    if usable:
        assert why == "KVM boots a stock kernel"
    else:
        # This machine: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69".
        assert re.match(
            r"KVM cannot boot a stock kernel here: "
            r"(KVM internal error\. |qemu-system-x86_64: |no kernel output within )",
            why,
        ), why
    saved = json.loads(next((tmp_path / "pytest-lbr").glob("kvm-probe-*.json")).read_text())
    assert saved == {"usable": usable, "why": why}


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


def test_cli_lists_vm(tmp_path: Path) -> None:
    out = subprocess.run([PYTEST_LBR, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "vm" in out.stdout
    help_ = _run("--help", cwd=tmp_path)
    assert help_.returncode == 0 and "--kernel K" in help_.stdout and "--shard I/N" in help_.stdout
    assert "--env NAME[=VALUE]" in help_.stdout and "PYTEST_ADDOPTS" in help_.stdout
    assert os.listdir(tmp_path) == []


def test_a_kernel_tree_built_with_vng_is_booted_as_a_tree(tmp_path: Path) -> None:
    """`--kernel DIR` (a tree `vng --build` made): vng gets the tree, so it finds the modules."""
    _kernel_or_skip("6.12")  # the tools are installed
    tree = tmp_path / "linux"
    (tree / "arch" / "x86" / "boot").mkdir(parents=True)
    out = _run("--kernel", str(tree), "--tcg", "--dry-run", cwd=tmp_path)
    assert out.returncode == EXIT_NO_GUEST
    assert out.stderr.strip() == (
        f"[vm] error: {tree} is a directory but not a built kernel tree (vng --build)"
    )
    (tree / "arch" / "x86" / "boot" / "bzImage").write_bytes(b"")
    out = _run("--kernel", str(tree), "--tcg", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"--run {tree} " in out.stdout
    assert f"--rwdir {tmp_path / 'lbr-results' / 'linux'}" in out.stdout


def test_guest_output_is_echoed_in_whole_prefixed_lines(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    import io

    console = io.BytesIO()
    echo = vm_run._Echo(console, "[6.1] ", hold=1000)
    echo.feed(b"..")  # pytest -q's dots: no newline yet
    assert capfdbinary.readouterr().out == b""
    echo.feed(b"..\nxy")
    assert capfdbinary.readouterr().out == b"[6.1] ....\n"
    echo.feed(b"", final=True)
    assert capfdbinary.readouterr().out == b"[6.1] xy\n"
    echo.feed(b"", final=True)  # nothing pending: nothing printed
    assert capfdbinary.readouterr().out == b""
    assert console.getvalue() == b"....\nxy"  # the log gets the bytes as they came
    # A partial line held past `hold` seconds is shown anyway: progress stays visible.
    impatient = vm_run._Echo(io.BytesIO(), "[6.12] ", hold=0)
    impatient.feed(b"...")
    impatient.feed(b"")
    assert capfdbinary.readouterr().out == b"[6.12] ...\n"
