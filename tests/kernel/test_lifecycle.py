"""Every kernel object a trace makes is gone afterwards: pass, failure, Ctrl-C.

Counted from the kernel's side (program and link ids via bpftool) and from
ours (perf event fds, all fds), before and after each way a trace can end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_lbr.capture.lbr.backend import LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_target
from pytest_lbr.tracer import Tracer, TracingUnavailable
from tests.kernel.kernel_state import bpf_ids, tracefs_state

pytestmark = pytest.mark.kernel

TARGETS = ["kfunc:vfs_write", "tp:syscalls/sys_enter_getppid", "kfunc:write_n*"]


def _fds() -> tuple[int, int]:
    perf_fds = 0
    fds = os.listdir("/proc/self/fd")
    for fd in fds:
        try:
            perf_fds += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:
            pass
    return len(fds), perf_fds


def _state() -> dict[str, object]:
    return {
        "progs": bpf_ids("prog"),
        "links": bpf_ids("link"),
        "fds": _fds(),
        "tracefs": tracefs_state(),
    }


@contextmanager
def lbr_trace(*targets: str) -> Iterator[Trace]:
    """The LBR capture as `Tracer.trace` drives it, on software events."""
    capture = LbrCapture(
        [parse_target(t) for t in targets], check=False, open_events=perf.software_branch_events
    )
    trace = Trace()
    try:
        capture.start()
        armed = _state()
        assert armed["links"] - before_links() and armed["fds"][1] > 0  # type: ignore[index]
        # The hooks really show in tracefs, so "identical afterwards" means something.
        assert armed["tracefs"] != _before["tracefs"]
        yield trace
        trace.__dict__.update(capture.stop().__dict__)
    finally:
        capture.close()


_before: dict[str, object] = {}


def before_links() -> set[int]:
    return _before["links"]  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def unchanged() -> Iterator[None]:
    _before.clear()
    _before.update(_state())
    yield
    assert _state() == _before


def test_passing_trace_releases_everything() -> None:
    with lbr_trace(*TARGETS) as trace:
        fd = os.open("/dev/null", os.O_WRONLY)
        os.write(fd, b"abc")
        os.close(fd)
        os.getppid()
    assert trace.backend == "lbr" and trace.lost == 0
    writes = [h for h in trace.hits if h.target == "kfunc:vfs_write" and h.retval == 3]
    assert writes and writes[0].pid == os.getpid()
    assert any(h.target == "tp:syscalls/sys_enter_getppid" for h in trace.hits)
    assert any(h.target == "kfunc:write_null" for h in trace.hits)
    # No PMU here: the snapshot failed and the trace says so.
    assert any("snapshot failed" in n for n in trace.notes)


def test_failing_body_releases_everything() -> None:
    with pytest.raises(AssertionError, match="body failed"):
        with lbr_trace(*TARGETS):
            raise AssertionError("body failed")


def test_keyboard_interrupt_releases_everything() -> None:
    with pytest.raises(KeyboardInterrupt):
        with lbr_trace(*TARGETS):
            raise KeyboardInterrupt


def test_attach_error_half_way_releases_everything() -> None:
    with pytest.raises(Exception, match="not a function in the kernel BTF"):
        with lbr_trace("kfunc:vfs_write", "kfunc:write_n*", "kfunc:no_such_function_xyz"):
            pytest.fail("must not arm")


def test_unavailable_lbr_through_tracer_leaves_nothing() -> None:
    tracer = Tracer(backend="lbr")
    if tracer.available:
        pytest.skip("this machine has LBR")
    with pytest.raises(TracingUnavailable):
        with tracer.trace("kfunc:vfs_write"):
            pass
