"""The LBR backend in a guest: perf_event_attr accepted, probe reasons, clean refusal."""

from __future__ import annotations

import ctypes
import errno
import os
import textwrap

import pytest

from pytest_lbr.capture.lbr.backend import probe_lbr
from pytest_lbr.kernel import perf
from pytest_lbr.tracer import Tracer, TracingUnavailable
from tests.commands import PYTEST_QUIET

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

HAS_LBR = os.path.exists("/sys/bus/event_source/devices/cpu/caps/branches")


def _software(attr: perf.perf_event_attr) -> perf.perf_event_attr:
    attr.type = perf.PERF_TYPE_SOFTWARE
    attr.config = 0  # PERF_COUNT_SW_CPU_CLOCK
    return attr


def _errno_of(attr: perf.perf_event_attr) -> int:
    try:
        os.close(perf.perf_event_open(attr, -1, 0))
    except OSError as exc:
        return exc.errno or 0
    return 0


def test_attr_layout_is_accepted_by_the_kernel() -> None:
    attr = _software(perf.branch_attr("any"))
    attr.sample_type = 0
    attr.sample_period = 1_000_000
    assert _errno_of(attr) == 0


def test_kernel_reads_sample_and_branch_fields_where_we_put_them() -> None:
    # A software event refuses a branch stack (EOPNOTSUPP), which proves the
    # kernel saw sample_type; an undefined branch_sample_type bit is EINVAL
    # before that, which proves it read branch_sample_type at our offset.
    attr = _software(perf.branch_attr("any_return"))
    assert _errno_of(attr) == errno.EOPNOTSUPP
    attr.branch_sample_type |= 1 << 40
    assert _errno_of(attr) == errno.EINVAL


def test_wrong_attr_size_is_e2big() -> None:
    attr = _software(perf.branch_attr("any"))
    attr.sample_type = 0
    attr.size = 40  # below PERF_ATTR_SIZE_VER0
    assert _errno_of(attr) == errno.E2BIG


def test_bigger_attr_with_unknown_nonzero_tail_is_e2big() -> None:
    class Padded(ctypes.Structure):
        _fields_ = [("attr", perf.perf_event_attr), ("tail", ctypes.c_uint64 * 16)]

    p = Padded()
    _software(p.attr)
    p.attr.size = ctypes.sizeof(p)
    p.tail[15] = 1  # a field no kernel knows yet
    with pytest.raises(OSError) as info:
        perf.perf_event_open(
            ctypes.cast(ctypes.byref(p), ctypes.POINTER(perf.perf_event_attr))[0], -1, 0
        )
    assert info.value.errno == errno.E2BIG


def test_branch_events_per_cpu_or_exact_error() -> None:
    try:
        events = perf.open_branch_events("any")
    except OSError as exc:
        assert not HAS_LBR
        assert exc.errno in (errno.ENOENT, errno.EOPNOTSUPP)
        return
    with events:
        assert len(events.fds) == len(perf.online_cpus())


@pytest.mark.skipif(HAS_LBR, reason="this machine has LBR: the no-LBR reason cannot appear")
def test_probe_says_exactly_why_not() -> None:
    cap = probe_lbr()
    assert not cap.available
    assert "no PMU" in cap.reason and "ENOENT" in cap.reason
    assert probe_lbr() is cap  # cached per process
    tracer = Tracer(backend="lbr")
    assert tracer.backend == "lbr" and not tracer.available and tracer.reason == cap.reason


@pytest.mark.skipif(HAS_LBR, reason="this machine has LBR")
def test_trace_with_lbr_backend_fails_cleanly() -> None:
    tracer = Tracer(backend="auto")
    with pytest.raises(TracingUnavailable, match="lbr backend unavailable: no PMU.*ENOENT"):
        with tracer.trace("kfunc:vfs_write", backend="lbr"):
            pytest.fail("the block must not run without LBR")


def test_the_software_pmu_traces_with_the_lbr_backend_without_branches() -> None:
    cap = probe_lbr("software")
    assert cap.available, cap.reason
    with Tracer(backend="lbr", pmu="software") as tracer:
        assert tracer.backend == "lbr" and tracer.available
        with tracer.trace("kfunc:vfs_write") as trace:
            with open("/dev/null", "w") as f:
                f.write("abc")
                f.flush()
    assert [(h.pid, h.retval, h.branches, h.in_interrupt) for h in trace.hits] == [
        (os.getpid(), 3, [], False)
    ], str(trace)
    assert trace.backend == "lbr" and trace.notes[0].startswith("no branches: "), trace.notes
    assert not trace.called("write_null")  # no branch records: nothing to match


PMU_SUITE = textwrap.dedent(
    """
    import os

    def test_hits_without_branches(lbr):
        with lbr.trace("kfunc:vfs_write", scope="children") as trace:
            os.system("echo hi > /dev/null")
        assert lbr.backend == "lbr"
        assert any(h.pid != os.getpid() and h.retval == 3 for h in trace.hits), str(trace)
        assert all(h.branches == [] for h in trace.hits)
        assert any(n.startswith("no branches: ") for n in trace.notes)
    """
)


@pytest.mark.slow
def test_the_plugin_runs_the_lbr_backend_on_software_events(pytester: pytest.Pytester) -> None:
    """--lbr-pmu=software from the command line, and lbr_pmu = software from the ini."""
    pytester.makepyfile(test_pmu=PMU_SUITE)
    res = pytester.runpytest_subprocess(
        *PYTEST_QUIET, "--lbr", "--lbr-require", "--lbr-backend=lbr", "--lbr-pmu=software"
    )
    res.assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nlbr_pmu = software\n")
    res = pytester.runpytest_subprocess(*PYTEST_QUIET, "--lbr", "--lbr-require")
    res.assert_outcomes(passed=1)
