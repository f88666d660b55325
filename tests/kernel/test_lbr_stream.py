"""The LBR capture streams (`LbrCapture.poll()`), in a guest (6.1 and 6.12): on
software events (no PMU under TCG, so hits carry no branches), every hook is real
and each hit is handed over once, while the capture is armed.

The traced process is a Python loop writing to /dev/null every 10 ms: each write
is write(2) -> ksys_write -> vfs_write -> write_null.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from pytest_lbr.capture import CaptureError, Scope
from pytest_lbr.capture.base import LIVE_OWN_PROCESS
from pytest_lbr.capture.lbr.backend import LbrBackend, LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.model import Hit
from pytest_lbr.targets import parse_targets
from tests.commands import PYTEST_LBR
from tests.kernel.writer import WRITER, writing_process

pytestmark = pytest.mark.kernel


@pytest.fixture
def writer() -> Iterator[subprocess.Popen[bytes]]:
    with writing_process() as proc:
        yield proc


def _capture(pid: int) -> LbrCapture:
    return LbrCapture(
        parse_targets(["kfunc:write_null"]),
        check=False,
        open_events=perf.software_branch_events,
        scope=Scope.of("process", pid=pid),
    )


def test_poll_hands_over_each_hit_once_while_armed(writer) -> None:
    capture = _capture(writer.pid)
    polled: list[list[Hit]] = []
    try:
        capture.start()
        deadline = time.monotonic() + 20  # generous: Python is far slower in an emulated guest
        while time.monotonic() < deadline and sum(map(len, polled)) < 5:
            polled.append(capture.poll())
            time.sleep(0.1)
        rest = capture.stop().hits
    finally:
        capture.close()
    streamed = [h for batch in polled for h in batch]
    assert len(streamed) >= 5, f"only {len(streamed)} hits streamed in 20 s"
    assert {h.pid for h in streamed + rest} == {writer.pid}
    assert {h.target for h in streamed} == {"kfunc:write_null"}
    assert all(h.retval == 2 for h in streamed)  # fexit: write_null returns the count
    # In order, and none handed over twice (stop() gives only the rest).
    times = [h.timestamp_ns for h in streamed + rest]
    assert times == sorted(times) and len(set(times)) == len(times)
    # The command name is read while the writer runs: it is there.
    assert {h.comm for h in streamed} == {os.path.basename(sys.executable)[:15]}


@pytest.mark.slow
def test_the_cli_streams_json_hits_of_one_pid_on_software_events(writer) -> None:
    """`pytest-lbr trace --backend lbr --pmu software kfunc:write_null --pid P --count 3
    --json`: three objects, all of P, each with write_null's return value and no
    branches, and the trace's note saying why there are none."""
    other = subprocess.Popen([sys.executable, "-c", WRITER], stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline() == b"ready\n"
        res = subprocess.run(
            [PYTEST_LBR, "trace", "--backend", "lbr", "--pmu", "software", "kfunc:write_null"]
            + ["--pid", str(writer.pid), "--count", "3", "--json"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        other.kill()
        other.wait()
    assert res.returncode == 0, res.stderr
    hits = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(hits) == 3, res.stdout
    comm = os.path.basename(sys.executable)[:15]
    for hit in hits:
        assert (hit["target"], hit["pid"], hit["comm"], hit["retval"]) == (
            "kfunc:write_null",
            writer.pid,
            comm,
            2,
        )
        assert hit["branches"] == [] and hit["in_interrupt"] is False
    err = res.stderr.splitlines()
    assert err[0].startswith(f"Tracing kfunc:write_null with the lbr backend (pid {writer.pid}; ")
    assert any(line.startswith("note: no branches: ") for line in err), err
    assert err[-1] == "3 hit(s), 0 record(s) lost", err


def test_a_live_lbr_capture_of_this_process_is_refused() -> None:
    with pytest.raises(CaptureError, match="cannot record its own process"):
        LbrBackend().open(parse_targets(["kfunc:write_null"]), scope=Scope(), live=True)
    assert "own process" in LIVE_OWN_PROCESS
