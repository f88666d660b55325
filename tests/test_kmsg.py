"""Kernel splats: finding them in kernel log text, reading /dev/kmsg, the plugin's option.

tests/data/dmesg-*-warn.txt are what `dmesg` printed in the 6.1 and 6.12 guests
after tests/kernel/test_splat.py (a WARN() from tests/kmod/splat.c). The texts in
tests/data/kmsg-*.txt are /dev/kmsg records in these kernels' formats (that WARN()
as /dev/kmsg gives it, a NULL dereference oops, RCU stalls, a KASAN report, and boot
noise that must not count). A real splat failing a real test is
tests/kernel/test_splat.py, in the guests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.guest_mode import SPLATS_FILE
from pytest_lbr.kernel.kmsg import (
    MAX_SPLAT_LINES,
    KernelLog,
    KmsgError,
    Splat,
    find_splats,
    is_own_task,
)
from pytest_lbr.report.record import TestRecord
from pytest_lbr.report.render import render_html, write_html, write_test_files
from pytest_lbr.vm import GuestResult, unreported_splats
from tests.commands import PYTEST_QUIET
from tests.fuzzing import fuzz_settings

pytest_plugins = ["pytester"]
DATA = Path(__file__).parent / "data"
WARN_MESSAGE = "pytest-lbr test: a warning provoked on purpose"


def splats_in(name: str) -> list[Splat]:
    return find_splats((DATA / name).read_text().splitlines())


def as_dmesg(kmsg_text: str) -> str:
    """What `dmesg` prints for these records: a time stamp, the text unescaped, no
    dictionary lines (user-space records are printed too: dmesg cannot tell them)."""
    out = []
    for line in kmsg_text.splitlines():
        head, sep, text = line.partition(";")
        if not sep or line.startswith(" "):
            continue
        usec = int(head.split(",")[2])
        text = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text)
        out.append(f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {text}")
    return "\n".join(out) + "\n"


def test_a_provoked_warning_is_one_splat_with_its_message() -> None:
    first, second = splats_in("kmsg-6.12-warn.txt")
    assert first.title.startswith("WARNING: CPU: 1 PID: 412 at /work/main/tests/kmod/build/")
    assert first.title.endswith("splat.c:17 splat_write+0x15/0x20 [splat]")
    assert first.message == WARN_MESSAGE
    assert first.summary == f"{first.title} ({WARN_MESSAGE})"
    assert first.lines[0] == "------------[ cut here ]------------"
    assert first.lines[-1] == "---[ end trace 0000000000000000 ]---"
    assert " full_proxy_write+0x5c/0x90" in first.lines
    assert first.pid == 412
    assert first.key == f"[   95.112890] {first.title}"
    text = "\n".join(first.lines + second.lines)
    for elsewhere in ("renamed from eth0", "SUBSYSTEM=net", "taints kernel", "session goes on"):
        assert elsewhere not in text
    assert (second.pid, second.message) == (413, WARN_MESSAGE)
    assert second.lines[-1].startswith("---[ end trace")


@pytest.mark.parametrize(
    ("kernel", "pid", "offset"), [("6.1", 250, "0x15/0x20"), ("6.12", 287, "0x19/0x30")]
)
def test_the_warning_captured_in_each_guest_is_one_splat(
    kernel: str, pid: int, offset: str
) -> None:
    """`dmesg` in a guest after tests/kernel/test_splat.py (the file ends in the next
    splat's "cut here": an opening line without its title is no splat)."""
    (splat,) = splats_in(f"dmesg-{kernel}-warn.txt")
    release = {"6.1": "6.1.0-56-amd64", "6.12": "6.12.117+deb12-amd64"}[kernel]
    assert splat.title == (
        f"WARNING: CPU: 0 PID: {pid} at /work/main/tests/kmod/build/{release}/splat.c:17 "
        f"splat_write+{offset} [splat]"
    )
    assert (splat.message, splat.pid) == (WARN_MESSAGE, pid)
    assert splat.lines[0] == "------------[ cut here ]------------"
    assert splat.lines[-1] == "---[ end trace 0000000000000000 ]---"
    assert splat.key.startswith("[  1") and splat.key.endswith(splat.title)


def test_an_oops_is_one_splat_from_its_bug_line_to_its_end_marker() -> None:
    (oops,) = splats_in("kmsg-6.1-oops.txt")
    assert oops.title == "BUG: kernel NULL pointer dereference, address: 0000000000000000"
    assert "Oops: 0000 [#1] PREEMPT SMP NOPTI" in oops.lines
    assert oops.lines[-1] == "---[ end trace 0000000000000000 ]---"  # after the modules
    assert oops.pid == 318
    assert oops.message == ""


def test_rcu_stalls_are_splats() -> None:
    self_detected, detected = splats_in("kmsg-6.12-rcu-stall.txt")
    assert self_detected.title == "rcu: INFO: rcu_preempt self-detected stall on CPU"
    assert (
        "rcu: \t1-....: (5249 ticks this GP) idle=86c4/1/0x4000000000000000 softirq=8804/8804 fqs=2443"
        in (self_detected.lines)
    )
    assert self_detected.lines[-1] == " </TASK>"  # a stack dump without an end marker
    assert self_detected.pid == 0  # the idle task: nobody's test
    assert detected.title == "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"
    assert "rcu: \tTasks blocked on level-0 rcu_node (CPUs 0-1): P412" in detected.lines


def test_a_kasan_report_runs_to_its_closing_banner() -> None:
    (kasan,) = splats_in("kmsg-kasan.txt")
    assert kasan.title == "BUG: KASAN: slab-use-after-free in bpf_map_lookup_test+0x6c/0x80"
    assert kasan.lines[0] == kasan.lines[-1] == "=" * 66
    assert "Freed by task 412:" in kasan.lines  # past the first call trace
    assert "Disabling lock debugging due to kernel taint" not in kasan.lines
    assert kasan.pid == 412


def test_lines_that_only_mention_a_title_are_not_splats() -> None:
    """Titles count at the start of a kernel message only: not inside one (`Spectre V2 :
    WARNING: ...`, a command line's `rcu_cpu_stall_timeout`, `[Firmware Bug]`), not in
    a record user space wrote (`echo 'WARNING: ...' >/dev/kmsg`), not in a dictionary."""
    assert splats_in("kmsg-noise.txt") == []


@pytest.mark.parametrize(
    "name", ["kmsg-6.12-warn.txt", "kmsg-6.1-oops.txt", "kmsg-6.12-rcu-stall.txt", "kmsg-kasan.txt"]
)
def test_dmesg_text_gives_the_same_splats_and_keys(name: str) -> None:
    """The VM runner reads the guest's `dmesg` output; the plugin reads /dev/kmsg: a
    splat must have the same key in both, or the runner would report it twice."""
    from_kmsg = splats_in(name)
    from_dmesg = find_splats(as_dmesg((DATA / name).read_text()).splitlines())
    assert from_kmsg
    assert [(s.key, s.lines) for s in from_dmesg] == [(s.key, s.lines) for s in from_kmsg]


TITLES = ["WARNING: CPU: 0 PID: 1 at x", "BUG: x", "Oops: 0000", "KASAN: x", "UBSAN: x"]
MARKERS = ["------------[ cut here ]------------", "=" * 66, " </TASK>", "---[ end trace 0 ]---"]
log_line = st.one_of(
    st.text(max_size=60),
    st.sampled_from(TITLES + MARKERS),
    st.tuples(
        st.text(alphabet="0123456789", min_size=1, max_size=30),
        st.text(alphabet="0123456789,-c", max_size=30),
        st.sampled_from(["", *TITLES, *MARKERS, "\\x0a", "\\xff\\x09", "\\x"]),
    ).map(lambda t: f"{t[0]},{t[1]};{t[2]}"),
    st.tuples(st.text(alphabet=" 0123456789.[]TC", max_size=30), st.sampled_from(TITLES)).map(
        lambda t: f"[{t[0]}] {t[1]}"
    ),
)


@fuzz_settings(300)
@given(st.lists(log_line, max_size=30))
@example(["4," + "9" * 5000 + ",1,-;BUG: x"])  # int() refuses thousands of digits
@example(["[" + "9" * 5000 + ".1] BUG: x", "CPU: 0 PID: " + "9" * 5000])
def test_kernel_log_text_never_breaks_the_parser(lines: list[str]) -> None:
    """Any text (a damaged dmesg.txt) gives splats, each starting at or before its
    title and holding at most MAX_SPLAT_LINES lines, and never an exception."""
    for splat in find_splats(lines):
        assert splat.title in splat.lines
        assert len(splat.lines) <= MAX_SPLAT_LINES
        assert isinstance(splat.summary + splat.key, str)
        assert splat.pid is None or splat.pid >= 0


def test_a_splat_without_an_end_is_cut_at_max_lines() -> None:
    lines = [
        "------------[ cut here ]------------",
        "BUG: scheduling while atomic: python3/412/0x2",
    ]
    lines += [f" frame_{n}+0x1/0x2" for n in range(3 * MAX_SPLAT_LINES)]
    (splat,) = find_splats(lines)
    assert len(splat.lines) == MAX_SPLAT_LINES
    assert splat.key == splat.title  # no time stamp in plain text


def test_own_tasks_are_this_process_and_its_live_children() -> None:
    assert is_own_task(os.getpid())
    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            assert is_own_task(child.pid)
        finally:
            child.kill()
    assert not is_own_task(1)
    assert not is_own_task(os.getppid())


def needs_kmsg() -> None:
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK) or os.geteuid() != 0:
        pytest.skip("needs root: reads and writes /dev/kmsg")


def write_kmsg(text: str) -> None:
    with open("/dev/kmsg", "w") as kmsg:  # a record from user space: never a splat
        kmsg.write(text + "\n")


def test_read_new_returns_what_was_logged_since_the_last_read() -> None:
    needs_kmsg()
    mark = f"pytest-lbr kmsg test {uuid.uuid4()}"
    with KernelLog() as log:
        write_kmsg(mark)
        lines = log.read_new()
        (record,) = [line for line in lines if line.endswith(mark)]
        assert re.match(r"^\d+,\d+,\d+,[^;]*;", record), record
        assert int(record.split(",")[0]) >> 3 == 1  # LOG_USER: what user space writes gets
        assert find_splats(lines) == []
        assert not any(mark in line for line in log.read_new())  # read once
        assert log.missed == 0
    with KernelLog() as later:  # a new log starts at the end: the old record is not new
        assert not any(mark in line for line in later.read_new())


def test_unreadable_log_is_one_line() -> None:
    with pytest.raises(KmsgError) as err:
        KernelLog("/nonexistent/kmsg")
    assert err.value.strerror == (
        "cannot read the kernel log (/nonexistent/kmsg): No such file or directory"
    )


QUIET_SUITE = """
import pytest

def test_one():
    pass

@pytest.mark.allow_splat
def test_two():
    pass
"""


def test_unknown_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(QUIET_SUITE)
    result = pytester.runpytest(*PYTEST_QUIET, "--lbr-kernel-splats=warn")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --lbr-kernel-splats: invalid choice: 'warn'*"])
    pytester.makeini("[pytest]\nlbr_kernel_splats = sometimes\n")
    result = pytester.runpytest(*PYTEST_QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--lbr-kernel-splats / lbr_kernel_splats: unknown value 'sometimes'; choose from fail, off"
        ]
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_quiet_kernel_log_changes_nothing(
    pytester: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    """Watching costs no test anything when the kernel says nothing (and, not root,
    the header says why it does not watch)."""
    pytester.makepyfile(QUIET_SUITE)
    result = pytester.runpytest(*PYTEST_QUIET, *workers, "--lbr-kernel-splats=fail")
    result.assert_outcomes(passed=2)
    assert "kernel splat" not in result.stdout.str()
    if os.geteuid() == 0:
        assert "kernel splats are not watched" not in result.stdout.str()


def test_not_watched_without_permission_is_one_header_note() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the inner session as user 65534")
    with tempfile.TemporaryDirectory(prefix="lbr-kmsg-", dir="/tmp") as tmp:
        os.chmod(tmp, 0o777)
        (Path(tmp) / "test_quiet.py").write_text(QUIET_SUITE)
        cmd = [sys.executable, "-m", "pytest", *PYTEST_QUIET, "--lbr-kernel-splats=fail"]
        env = {**os.environ, "HOME": tmp, "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        try:
            out = subprocess.run(
                cmd, cwd=tmp, env=env, user=65534, capture_output=True, text=True, timeout=300
            )
        except PermissionError:
            pytest.skip(f"user 65534 cannot run {sys.executable}")
    if "Permission denied" in out.stderr and out.returncode != 0 and "passed" not in out.stdout:
        pytest.skip(f"user 65534 cannot run this venv: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stdout + out.stderr
    notes = [line for line in out.stdout.splitlines() if "kernel splats" in line]
    assert notes == [
        "lbr: kernel splats are not watched: cannot read the kernel log (/dev/kmsg): "
        "Operation not permitted: run as root (reading the kernel log needs CAP_SYSLOG "
        "when kernel.dmesg_restrict=1)"
    ], out.stdout


def test_the_report_shows_a_test_s_splat(tmp_path: Path) -> None:
    (splat, _) = splats_in("kmsg-6.12-warn.txt")
    record = TestRecord("tests/test_x.py::test_warns", outcome="failed", splats=[splat])
    text = write_test_files(tmp_path, record)
    assert text.read_text() == f"# kernel splat\n{splat.text}\n"
    html = (write_html(tmp_path) or tmp_path).read_text()
    assert "pytest-lbr: 0 traced test(s), 1 with a kernel splat" in html
    assert '<span class="tag">kernel splat</span>' in html
    assert f'<pre class="splat">{splat.lines[0]}\n{WARN_MESSAGE}\nWARNING: CPU: 1 PID: 412' in html
    allowed = render_html(
        [
            {
                "nodeid": "t::a",
                "outcome": "passed",
                "text": "a.txt",
                "traces": [],
                "golden": [],
                "splats": ["BUG: x"],
                "splats_allowed": True,
            }
        ]
    )
    assert "kernel splat during this test (allowed: allow_splat)" in allowed


def test_vm_runner_fails_on_the_splats_pytest_did_not_report(tmp_path: Path) -> None:
    kmsg = (DATA / "kmsg-6.12-warn.txt").read_text()
    (tmp_path / "dmesg.txt").write_text(as_dmesg(kmsg))
    reported, missed = find_splats(kmsg.splitlines())
    assert [s.key for s in unreported_splats(tmp_path)] == [reported.key, missed.key]
    (tmp_path / SPLATS_FILE).write_text(f"{reported.key}\n")
    assert [s.key for s in unreported_splats(tmp_path)] == [missed.key]
    result = GuestResult(
        "6.12", 1, tmp_path, note=f"kernel splat no test reported: {missed.summary}"
    )
    assert result.line().endswith(f"; kernel splat no test reported: {missed.summary}")
    (tmp_path / "dmesg.txt").unlink()
    assert unreported_splats(tmp_path) == []  # no log saved: nothing to say
