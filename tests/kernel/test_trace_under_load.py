"""A trace under load holds exactly its own hits, in a guest.

While stress-ng keeps both vCPUs busy (a CPU hog; context switches through
pipes, whose writes enter vfs_write; UDP over loopback, for softirqs) and a
child process writes to /dev/null in a loop, the test traces `kfunc:vfs_write`
around its own WRITES writes, on the graph backend and on the LBR path
(software perf events: the guests have no PMU). The child's write count
(/proc/PID/io) proves it entered vfs_write while the trace was armed. Every hit
must be the test's thread's, one per write in order (the return values are the
sizes written), nothing lost; and once the trace and then the session's
backend are closed, still under load, the kernel must be as it was before.

As in a suite, the session's first trace (which turns the graph backend's
function tracer on, slow under load) is taken before the load starts.

It runs in the 6.1 guest only (`one_kernel`, tests/kernel/conftest.py): the two
guests share the host's two cores, and with stress-ng in both at once (CI runs them
side by side, in the same shuffled order) each stalled past 15 minutes here, where
one alone takes under a minute.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_lbr.tracer import Tracer
from tests.kernel.kernel_state import (
    bpf_ids,
    open_fds,
    session_backend,
    tracefs_left_behind,
    tracefs_state,
)

pytestmark = [pytest.mark.kernel, pytest.mark.one_kernel("6.1")]

WRITES = 100
#: stress-ng's workers: one per kind, on a 2-vCPU guest. --timeout: gone by itself
#: should this process die before it stops them.
STRESS = ["stress-ng", "--cpu", "1", "--switch", "1", "--udp", "1", "--timeout", "600s", "-q"]
WRITER = """
import os
fd = os.open("/dev/null", os.O_WRONLY)
os.write(fd, b"x")
print("writing", flush=True)
while True:
    os.write(fd, b"x")
"""


@dataclass
class Load:
    """stress-ng and the writer child, running."""

    stress: subprocess.Popen[bytes]
    writer: subprocess.Popen[bytes]

    def writes(self) -> int:
        """write(2) calls the writer has made so far."""
        with open(f"/proc/{self.writer.pid}/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("syscw:"))

    def running(self) -> bool:
        return self.stress.poll() is None and self.writer.poll() is None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End `proc` and its process group (stress-ng forks its workers into it)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
    # A worker that outlived its parent is still in the group.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def under_load(tmp: Path) -> Iterator[Load]:
    """stress-ng and the writer child running for the block; both stopped however it ends."""
    log = tmp / "stress-ng.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(log, "wb") as out:
            # Its temp path is the working directory by default: read-only in the guests.
            procs.append(
                subprocess.Popen(
                    [*STRESS, "--temp-path", str(tmp)],
                    cwd=tmp,
                    start_new_session=True,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER], start_new_session=True, stdout=subprocess.PIPE
            )
        )
        stress, writer = procs
        assert writer.stdout is not None and writer.stdout.readline() == b"writing\n"
        assert stress.poll() is None, (
            f"stress-ng exited with {stress.returncode}: {log.read_text()}"
        )
        yield Load(stress, writer)
    finally:
        for proc in reversed(procs):
            _stop(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def _fd_targets() -> dict[str, str]:
    """This process's open fds and what they are: the message when a count differs."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


def _state() -> dict[str, object]:
    return {
        "progs": bpf_ids("prog"),
        "links": bpf_ids("link"),
        "maps": bpf_ids("map"),
        "fds": open_fds(),
        "tracefs": tracefs_state(),
    }


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["graph", "lbr"])
def test_trace_under_load_holds_only_its_own_hits(backend: str, tmp_path: Path) -> None:
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng is not installed (Debian package stress-ng; ci/setup installs it)")
    sizes = [1 + i % 64 for i in range(WRITES)]
    null = os.open("/dev/null", os.O_WRONLY)
    before = _state()
    session = session_backend(backend)
    try:
        with Tracer(backend=session) as tracer:
            with tracer.trace("kfunc:vfs_write"):
                os.write(null, b"x")
            with under_load(tmp_path) as load:
                with tracer.trace("kfunc:vfs_write") as trace:
                    first = load.writes()
                    for i, n in enumerate(sizes):
                        os.write(null, bytes(n))
                        if i % 10 == 9:
                            time.sleep(0.001)  # let the others in on this CPU too
                    others = load.writes() - first
                session.close()
                after = _state()
                running = load.running()
            after["fds"] = open_fds()  # without the writer's pipe
    finally:
        os.close(null)
        session.close()
    assert running, "the load stopped before the trace was released"
    assert others > 0, "the writer child never wrote while the trace was armed"
    me = (os.getpid(), threading.get_native_id())
    assert [(h.pid, h.tid) for h in trace.hits] == [me] * len(trace.hits), {
        (h.pid, h.tid) for h in trace.hits
    }
    # One hit per write, in order; none lost, which is also the true loss.
    assert [h.retval for h in trace.hits] == sizes
    assert trace.lost == WRITES - len(trace.hits) == 0
    left = tracefs_left_behind(before.pop("tracefs"), after.pop("tracefs"))  # type: ignore[arg-type]
    assert left == {}, left
    assert after == before, _fd_targets()
    print(f"{backend}: {WRITES} own hits; the writer child wrote {others} times meanwhile")
