"""The graph backend in a guest: real ftrace records, real BPF test runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture.ftrace import find_tracefs
from pytest_lbr.capture.graph import probe_graph
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import bpf_object

pytestmark = pytest.mark.kernel


def _tracefs_state() -> dict[str, str]:
    """What a trace must leave exactly as it found it."""
    root = find_tracefs()
    assert root is not None
    state = {"instances": " ".join(sorted(os.listdir(root / "instances")))}
    for name in (
        "kprobe_events",
        "uprobe_events",
        "set_ftrace_filter",
        "current_tracer",
        "set_ftrace_pid",
    ):
        path = Path(root / name)
        state[name] = path.read_text() if path.exists() else "<absent>"
    return state


@pytest.fixture
def xdp_helpers():
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        yield obj.programs["xdp_helpers"]


def test_probe_available() -> None:
    cap = probe_graph()
    assert cap.available, cap.reason


def test_bpf_program_helpers(xdp_helpers) -> None:
    before = _tracefs_state()
    with Tracer(backend="graph").trace(xdp_helpers) as trace:
        res = xdp_helpers.run(data=bytes(range(1, 65)))
    assert res.retval == 2  # XDP_PASS
    assert _tracefs_state() == before
    assert len(trace.hits) == 1, str(trace)
    assert trace.called("bpf_csum_diff", by="xdp_helpers"), str(trace)
    assert trace.called("bpf_xdp_adjust_head", by="xdp_helpers"), str(trace)
    assert trace.called("__htab_map_lookup_elem", by="xdp_helpers"), str(trace)
    # Only what the program called: nothing of the test-run machinery around it.
    assert not trace.called("bpf_test_run*"), str(trace)
    assert trace.lost == 0


def test_two_runs_two_hits(xdp_helpers) -> None:
    with Tracer(backend="graph").trace(xdp_helpers) as trace:
        xdp_helpers.run(data=bytes(range(1, 65)))
        xdp_helpers.run(data=bytes(range(2, 66)))
    assert len(trace.hits) == 2, str(trace)
    assert all(h.tid == os.getpid() for h in trace.hits)


def test_kfunc_vfs_write_path_and_retval() -> None:
    before = _tracefs_state()
    with Tracer(backend="graph").trace("kfunc:vfs_write") as trace:
        fd = os.open("/dev/null", os.O_WRONLY)
        try:
            os.write(fd, b"abc")
        finally:
            os.close(fd)
    assert _tracefs_state() == before
    assert len(trace.hits) == 1, str(trace)
    assert trace.has_path("vfs_write", "write_null"), str(trace)
    assert trace.called("write_null", by="vfs_write")
    assert trace.hits[0].retval == 3
    # The kretprobe's own handlers are kept out of the trace.
    assert not trace.called("*rethook*") and not trace.called("kprobe_ftrace_handler"), str(trace)


def test_tracepoint_hits() -> None:
    with Tracer(backend="graph").trace("tp:syscalls/sys_enter_getppid") as trace:
        os.getppid()
        os.getppid()
    assert len(trace.hits) == 2, str(trace)


def test_state_restored_after_failure_and_interrupt(xdp_helpers) -> None:
    before = _tracefs_state()
    tracer = Tracer(backend="graph")
    with pytest.raises(AssertionError):
        with tracer.trace("kfunc:vfs_write"):
            raise AssertionError("test body failed")
    assert _tracefs_state() == before
    with pytest.raises(KeyboardInterrupt):
        with tracer.trace(xdp_helpers):
            raise KeyboardInterrupt
    assert _tracefs_state() == before


def test_unknown_function_is_an_error() -> None:
    before = _tracefs_state()
    with pytest.raises(Exception, match="no traceable kernel function"):
        with Tracer(backend="graph").trace("kfunc:no_such_function_xyz"):
            pass
    assert _tracefs_state() == before
