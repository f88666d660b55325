"""Whose work a trace records: another process (`pid=`), every
task and interrupt context (`scope="system"`), a cgroup's tasks (`cgroup=`), what
the test starts (`scope="children"`), on both backends: the graph backend, and the
LBR backend on software perf events (`--lbr-pmu=software`: every hook and in-kernel
filter is real, the hits carry no branches where there is no PMU).

The other process is a Python loop writing 2 bytes to /dev/null every 10 ms
(no process started per write, so a cgroup or pid holds just it): each is one
write(2) -> ksys_write -> vfs_write -> write_null.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from pytest_lbr.model import Trace
from pytest_lbr.tracer import Tracer
from tests.kernel.kernel_state import bpf_ids, session_backend, tracefs_left_behind, tracefs_state
from tests.kernel.writer import writing_process

pytestmark = pytest.mark.kernel

CGROUP_ROOT = Path("/sys/fs/cgroup")


BACKENDS = ["graph", "lbr"]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[object]:
    """One backend for the module, as a session keeps it (turning the function
    tracer on and off patches every call site, so the tests share it): the graph
    backend, and the LBR backend on software perf events."""
    before, links = tracefs_state(), bpf_ids("link")
    shared = session_backend(request.param)
    yield shared
    shared.close()
    # Whatever scope the traces had, closing the backend leaves nothing of its own:
    # what another tracer of the session let go meanwhile is not compared (a strict
    # comparison failed when an earlier test's instance went away during the module).
    assert tracefs_left_behind(before, tracefs_state()) == {}
    assert bpf_ids("link") - links == set()


@pytest.fixture
def writer() -> Iterator[subprocess.Popen[bytes]]:
    """Another process writing to /dev/null every 10 ms, in its loop when yielded."""
    with writing_process() as proc:
        yield proc


def _own_writes(n: int = 5) -> None:
    with open("/dev/null", "w") as f:
        for _ in range(n):
            f.write("y")
            f.flush()


def _hold(seconds: float = 0.3) -> None:
    """Let the other process run while armed, writing ourselves too."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _own_writes(1)
        time.sleep(0.05)


def test_pid_scope_records_that_process_only(writer, backend) -> None:
    links = bpf_ids("link")
    with Tracer(backend=backend) as tracer:
        with tracer.trace("kfunc:vfs_write", pid=writer.pid) as trace:
            _hold()
    assert bpf_ids("link") == links
    assert trace.hits, str(trace)
    assert {h.pid for h in trace.hits} == {writer.pid}, str(trace)
    comm = Path(f"/proc/{writer.pid}/comm").read_text().strip()
    assert all(h.comm == comm and not h.in_interrupt for h in trace.hits), str(trace)
    assert all(h.retval == 2 for h in trace.hits), str(trace)  # "x\n"
    if backend.capabilities.branches:
        assert trace.has_path("vfs_write", "write_null"), str(trace)


def test_system_scope_records_other_processes(writer, backend) -> None:
    with Tracer(backend=backend) as tracer:
        with tracer.trace("kfunc:vfs_write", scope="system") as trace:
            _hold()
        # The same session's next trace records this process only again.
        with tracer.trace("kfunc:vfs_write") as own:
            _own_writes()
    pids = {h.pid for h in trace.hits}
    assert {writer.pid, os.getpid()} <= pids, str(trace)
    comm = Path(f"/proc/{writer.pid}/comm").read_text().strip()
    assert all(h.comm == comm for h in trace.hits if h.pid == writer.pid), str(trace)
    assert {h.pid for h in own.hits} == {os.getpid()} and len(own.hits) == 5, str(own)


def test_process_scope_leaves_other_processes_out(writer, backend) -> None:
    with Tracer(backend=backend) as tracer:
        with tracer.trace("kfunc:vfs_write") as trace:
            _hold()
    assert trace.hits and {h.pid for h in trace.hits} == {os.getpid()}, str(trace)


@pytest.fixture
def cgroup() -> Iterator[Path]:
    """A new cgroup v2 directory (removed after the test, its tasks moved out first)."""
    if not (CGROUP_ROOT / "cgroup.procs").is_file():
        subprocess.run(["mount", "-t", "cgroup2", "none", str(CGROUP_ROOT)], check=True)
    path = CGROUP_ROOT / f"pytest-lbr-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                (CGROUP_ROOT / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # exited meanwhile
        path.rmdir()


@pytest.mark.slow
def test_cgroup_scope_records_the_cgroups_tasks(writer, cgroup: Path, backend) -> None:
    (cgroup / "cgroup.procs").write_text(str(writer.pid))
    with Tracer(backend=backend) as tracer:
        with tracer.trace("kfunc:vfs_write", cgroup=str(cgroup)) as trace:
            _hold()
        # A relative path is under /sys/fs/cgroup.
        with tracer.trace("kfunc:vfs_write", cgroup=cgroup.name) as again:
            _hold()
    assert trace.hits, str(trace)
    assert {h.pid for h in trace.hits} == {writer.pid}, str(trace)
    assert {h.pid for h in again.hits} == {writer.pid}, str(again)


def test_lbr_cgroup_scope_takes_the_cgroups_descendants(writer, cgroup: Path) -> None:
    """The LBR backend asks the kernel whether the task is under the cgroup at each
    hit, so a child cgroup's tasks count (the graph backend reads the cgroup's own
    threads at arming)."""
    child = cgroup / "inner"
    child.mkdir()
    try:
        (child / "cgroup.procs").write_text(str(writer.pid))
        with Tracer(backend=session_backend("lbr")) as tracer:
            with tracer.trace("kfunc:vfs_write", cgroup=str(cgroup)) as trace:
                _hold()
    finally:
        (CGROUP_ROOT / "cgroup.procs").write_text(str(writer.pid))
        child.rmdir()
    assert trace.hits and {h.pid for h in trace.hits} == {writer.pid}, str(trace)


XDP_OBJECT = Path(__file__).parents[2] / "examples" / "veth_xdp" / "build" / "veth_xdp.bpf.o"
XDP_PASS, PACKETS, PORT = 2, 5, 4242


@pytest.mark.slow
def test_system_scope_records_xdp_in_interrupt_context(bpf, veth, backend) -> None:
    """XDP runs where the veth receives, in softirq: under scope="system" one hit per
    packet, with the program's return value and in_interrupt set."""
    assert XDP_OBJECT.is_file(), f"{XDP_OBJECT} not built: make -C examples"
    prog = bpf.load(XDP_OBJECT).programs["veth_xdp"]
    prog.attach_xdp(veth.host.name, mode="driver")
    with closing(veth.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(10)
        with Tracer(backend=backend) as tracer, tracer.trace(prog, scope="system") as trace:
            for i in range(PACKETS):
                tx.sendto(b"packet %d" % i, (veth.host.addr, PORT))
            assert [rx.recv(64) for _ in range(PACKETS)] == [
                b"packet %d" % i for i in range(PACKETS)
            ]
    assert len(trace.hits) == PACKETS, str(trace)
    assert all(h.retval == XDP_PASS and h.in_interrupt for h in trace.hits), str(trace)


#: The child: a shell's builtin printf writes 3 bytes to /dev/null in one write(2). A
#: shell, not Python: the children scope records every function of the child's
#: start on the graph backend (a Python start is far too many functions to record and parse).
CHILD = ["sh", "-c", "printf abc > /dev/null"]


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["children", "process"])
def test_kfunc_hit_in_a_child_is_captured_with_children_scope_only(scope: str, backend) -> None:
    """A child started inside the block writes: its vfs_write is a hit of the
    children scope (with the child's pid and comm), and not of the default one
    (which still has ours)."""
    with Tracer(backend=backend) as tracer:
        with tracer.trace("kfunc:vfs_write", scope=scope) as trace:
            child = subprocess.Popen(CHILD)
            assert child.wait() == 0
            _own_writes(1)
    others = [h for h in trace.hits if h.pid != os.getpid()]
    assert [h.pid for h in trace.hits if h.pid == os.getpid()], str(trace)  # ours, either way
    if scope == "children":
        # The kernel names a task after the file it executed (15 characters kept).
        comm = "sh"  # the name it was started by, not dash, where sh links to
        writes = [h for h in others if h.retval == 3]
        assert writes and all(h.pid == child.pid and h.comm == comm for h in writes), str(trace)
        if backend.capabilities.branches:
            assert any(Trace(hits=[h]).has_path("vfs_write", "write_null") for h in writes)
    else:
        assert others == [], str(trace)
