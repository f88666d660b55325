"""Another process for scope tests to trace: a Python loop writing 2 bytes to
/dev/null every 10 ms (one write(2) -> ksys_write -> vfs_write -> write_null
each), with no process started per write, so a pid or a cgroup holds just it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["WRITER", "writing_process"]

WRITER = """
import os, sys, time
fd = os.open("/dev/null", os.O_WRONLY)
os.write(fd, b"x\\n")
print("ready", flush=True)
while True:
    os.write(fd, b"x\\n")
    time.sleep(0.01)
"""


@contextmanager
def writing_process() -> Iterator[subprocess.Popen[bytes]]:
    """The writer, in its loop when yielded; killed and reaped after."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
