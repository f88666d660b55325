"""`pytest-lbr trace` and `pytest-lbr doctor` in the guests, checked against
the output docs/cli.md documents."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.commands import PYTEST_LBR

pytestmark = pytest.mark.kernel

TRACEFS = Path("/sys/kernel/tracing")
HIT = re.compile(
    r"Hit at (\S+): cpu=\d+ pid=\d+ tid=\d+(?: comm=\S+)?(?: in_interrupt)?( retval=-?\d+)? branches=(\d+)"
)
#: A branch line; "(unseen caller)" stands for a caller the function tracer never
#: recorded (the graph backend, docs/guide.md).
_END = r"(?:\S+|\(unseen caller\))"
BRANCH = re.compile(rf"(\[#\d+\] )?{_END} (\(\S+:\d+\) )?-> {_END}( \(\S+:\d+\))?")


def cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTEST_LBR, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def keep_output(name: str, res: subprocess.CompletedProcess[str]) -> None:
    """Save the real output beside the guest's results (docs/cli.md quotes it)."""
    results = os.environ.get("PYTEST_LBR_RESULTS")
    if results:
        Path(results, f"cli-{name}.txt").write_text(res.stdout + "--- stderr\n" + res.stderr)


def leftovers() -> list[str]:
    """tracefs instances and kprobe events pytest-lbr made and did not remove."""
    inst = [p.name for p in (TRACEFS / "instances").iterdir() if p.name.startswith("pytest_lbr")]
    events = (TRACEFS / "kprobe_events").read_text().splitlines()
    return inst + [e for e in events if "pytest_lbr" in e or "lbr_" in e]


def test_trace_prints_a_hit_in_the_documented_format() -> None:
    res = cli("trace", "kfunc:vfs_write", "--count", "1")
    keep_output("trace", res)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    m = HIT.fullmatch(lines[0])
    assert m and m.group(1) == "kfunc:vfs_write", res.stdout
    n = int(m.group(3))
    # One line per branch; inlined frames (with a debug vmlinux, as on 6.1) follow on
    # indented continuation lines.
    branch_lines = [line for line in lines[1:] if not line.startswith("    . inlined ")]
    assert n == len(branch_lines) > 0 and lines[1].startswith(f"[#{n - 1:02d}] ")
    assert all(BRANCH.fullmatch(line) for line in branch_lines), res.stdout
    # The hit is the status-line write to stderr: ksys_write hands it to vfs_write.
    assert "-> vfs_write+0x0" in lines[1]
    assert res.stderr.splitlines()[0].startswith("Tracing kfunc:vfs_write with the ")
    assert res.stderr.splitlines()[-1] == "1 hit(s), 0 record(s) lost"
    assert not leftovers()


def test_trace_disasm_shows_the_call_instruction() -> None:
    """--disasm: capstone over the debug vmlinux (6.1) or /proc/kcore (6.12)."""
    res = cli("trace", "kfunc:vfs_write", "--count", "1", "--disasm")
    keep_output("trace-disasm", res)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert HIT.fullmatch(lines[0]), res.stdout
    assert "-> vfs_write+0x0" in lines[1]
    insns = []
    for line in lines[2:]:
        if not line.startswith("    "):
            break
        if not line.startswith("    . inlined "):  # 6.1: inlined frames of the branch
            insns.append(line)
    assert insns and not any("no disassembly" in i for i in insns), res.stdout
    # The taken branch is marked: the call into vfs_write, inside ksys_write.
    marked = [i for i in insns if i.startswith("    => ")]
    assert len(marked) == 1 and "ksys_write+0x" in marked[0], insns
    assert re.search(r"\bcall\b", marked[0]), insns
    assert not leftovers()


def test_ctrl_c_ends_trace_cleanly() -> None:
    proc = subprocess.Popen(
        [PYTEST_LBR, "trace", "kfunc:vfs_write"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # printed once armed
    assert first.startswith("Tracing kfunc:vfs_write"), first
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err
    assert HIT.match(out), out
    assert not leftovers()


def test_doctor_in_the_guest() -> None:
    res = cli("doctor")
    keep_output("doctor", res)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    status = {
        m.group(2): m.group(1)
        for m in map(re.compile(r"\[(ok|no)\] ([A-Za-z. ]+):").match, lines)
        if m
    }
    assert status["root"] == status["BTF"] == status["fentry"] == status["tracefs"] == "ok"
    assert status["PMU"] == status["LBR"] == "no"  # TCG has no PMU
    assert lines[-1] == "=> tracing works here: backend graph"
