"""A live thread's process id and command name from /proc (kernel/tasks.py)."""

from __future__ import annotations

import os
import subprocess
import threading

from pytest_lbr.kernel.tasks import live_comm, live_tgid


def test_a_thread_belongs_to_its_process_and_a_gone_one_to_none() -> None:
    tids: list[int] = []
    worker = threading.Thread(target=lambda: tids.append(threading.get_native_id()))
    worker.start()
    worker.join()
    assert live_tgid(threading.get_native_id()) == os.getpid()
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert live_tgid(child.pid) == child.pid
    finally:
        child.kill()
        child.wait()
    assert live_tgid(child.pid) == 0  # reaped: gone
    assert live_tgid(tids[0]) in (0, os.getpid())  # ended: gone (its id not yet reused)


def test_a_live_threads_command_name_and_a_gone_ones() -> None:
    # A line echoed back proves the child runs `cat` (not python still, before its exec).
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write(b"ready\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"ready\n"
        assert live_comm(child.pid) == "cat"
    finally:
        child.kill()
        child.wait()
    assert live_comm(child.pid) == ""  # reaped: gone
