"""The graph backend in a guest: real ftrace records, real BPF test runs."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture.ftrace import find_tracefs
from pytest_lbr.capture.graph import probe_graph
from pytest_lbr.model import Trace
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
    _assert_only_the_program(trace)
    assert trace.lost == 0


#: What BPF_PROG_TEST_RUN does around the program (seen in the 6.1 and 6.12 guests).
MACHINERY = ("bpf_test_*", "bpf_prog_test_run*", "bpf_cgroup_storage_*", "bpf_ctx_*", "kfree")


def _assert_only_the_program(trace) -> None:
    """Each hit is one run: the program's calls, nested ones, and their returns."""
    for hit in trace.hits:
        for b in hit.branches:
            for loc in (b.src, b.dst):
                assert not any(fnmatch.fnmatchcase(loc.symbol or "", m) for m in MACHINERY), (
                    f"{b} is the test-run machinery\n{trace}"
                )
        # The program's last call (before XDP_PASS) returned last.
        last = hit.branches[-1]
        assert (last.kind, last.src.symbol) == ("ret", "bpf_xdp_adjust_head"), str(trace)
        assert hit.branches[0].kind == "call", str(trace)


@pytest.mark.parametrize(("runs", "repeat"), [(1, 1), (2, 1), (1, 3)])
def test_one_hit_per_run(xdp_helpers, runs: int, repeat: int) -> None:
    with Tracer(backend="graph").trace(xdp_helpers) as trace:
        for i in range(runs):
            xdp_helpers.run(data=bytes(range(1 + i, 65 + i)), repeat=repeat)
    assert len(trace.hits) == runs * repeat, str(trace)
    assert all(h.tid == os.getpid() for h in trace.hits)
    assert all(Trace(hits=[h]).called("bpf_csum_diff") for h in trace.hits), str(trace)
    _assert_only_the_program(trace)


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
    with Tracer(backend="graph") as tracer:
        with pytest.raises(AssertionError):
            with tracer.trace("kfunc:vfs_write"):
                raise AssertionError("test body failed")
        assert _tracefs_state()["kprobe_events"] == before["kprobe_events"]
        with pytest.raises(KeyboardInterrupt):
            with tracer.trace(xdp_helpers):
                raise KeyboardInterrupt
    assert _tracefs_state() == before


def test_function_tracer_armed_once_per_tracer() -> None:
    """The instance and its function tracer outlive a trace; each trace's probes do not;
    closing the tracer removes everything."""
    before = _tracefs_state()
    root = find_tracefs()
    assert root is not None
    with Tracer(backend="graph") as tracer:
        seen = []
        for n in (1, 2):
            with tracer.trace("kfunc:vfs_write") as trace:
                fd = os.open("/dev/null", os.O_WRONLY)
                os.write(fd, b"x" * n)
                os.close(fd)
            assert [h.retval for h in trace.hits] == [n], str(trace)
            during = _tracefs_state()
            assert during["kprobe_events"] == before["kprobe_events"]
            ours = set(during["instances"].split()) - set(before["instances"].split())
            assert len(ours) == 1, during["instances"]
            seen.append(ours.pop())
            instance = root / "instances" / seen[-1]
            assert (instance / "current_tracer").read_text().strip() == "function"
            assert (instance / "tracing_on").read_text().strip() == "0"
        assert seen[0] == seen[1]
    assert _tracefs_state() == before


def test_unknown_function_is_an_error() -> None:
    before = _tracefs_state()
    with pytest.raises(Exception, match="no traceable kernel function"):
        with Tracer(backend="graph").trace("kfunc:no_such_function_xyz"):
            pass
    assert _tracefs_state() == before
