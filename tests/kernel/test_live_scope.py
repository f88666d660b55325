"""One live-scope rule on both backends: the reader's own threads are never recorded,
and a process the reader starts while armed is, like any other task.

The reader writes to /dev/null itself and starts dd, which writes there too, both
while a system-wide live trace of vfs_write runs. dd's own count of its writes is
the truth for what must arrive (or be counted lost).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from pytest_lbr.live import LiveTrace

pytestmark = pytest.mark.kernel

WRITES = 200
PMU = {"graph": "hardware", "lbr": "software"}


@pytest.mark.parametrize("backend", list(PMU))
def test_the_reader_is_left_out_and_what_it_starts_is_recorded(backend: str) -> None:
    with LiveTrace(["kfunc:vfs_write"], backend=backend, pmu=PMU[backend]) as live:
        # Started while armed, by the reading process itself.
        dd = subprocess.Popen(
            ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={WRITES}", "status=none"]
        )
        with open("/dev/null", "wb", buffering=0) as null:
            for _ in range(WRITES):
                null.write(b"x")
        hits = [h for batch in live.batches(lambda: dd.poll() is not None) for h in batch]
    assert dd.returncode == 0
    started = [h for h in hits if h.tid == dd.pid]
    assert started, f"no hit of dd (pid {dd.pid}): {[(h.pid, h.comm) for h in hits[:20]]}"
    assert len(started) + live.lost >= WRITES
    assert not [h for h in hits if h.pid == os.getpid()]
