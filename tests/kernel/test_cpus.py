"""Hits on a CPU other than 0, in a guest with two or more CPUs (`pytest-lbr vm` boots two).

The test pins itself to one CPU at a time with sched_setaffinity, so each hit has a
known CPU: the graph backend reads it from ftrace's per-CPU buffers, the LBR tracer
from the CPU its hook ran on (its branch snapshot slot is per CPU, its perf events
one per CPU: software events here, the guest has no PMU, see test_lifecycle.py).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture.hooks.hook_set import HookSet
from pytest_lbr.capture.lbr.backend import LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_target
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import LAST_CPU, XDP_PASS, bpf_object

pytestmark = [pytest.mark.kernel, pytest.mark.allow_skip]

PACKET = bytes(range(1, 65))


@pytest.fixture
def on_cpu() -> Iterator[Callable[[int], None]]:
    """Pins this thread to a CPU; the CPUs it may use are restored afterwards."""
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2 or not {0, 1} <= allowed:
        pytest.skip(f"needs CPUs 0 and 1, this guest lets the test use {sorted(allowed)}")
    yield lambda cpu: os.sched_setaffinity(0, {cpu})
    os.sched_setaffinity(0, allowed)


@pytest.fixture
def xdp_helpers():
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        yield obj


def _run_on(on_cpu: Callable[[int], None], obj, cpu: int) -> None:
    """One BPF_PROG_TEST_RUN on `cpu`; the program itself notes where it ran."""
    on_cpu(cpu)
    assert obj.programs["xdp_helpers"].run(data=PACKET).retval == XDP_PASS
    assert int.from_bytes(obj.maps["last"][LAST_CPU], "little") == cpu


@pytest.mark.slow
def test_graph_hits_carry_the_cpu_they_ran_on(on_cpu, xdp_helpers) -> None:
    with Tracer(backend="graph").trace(xdp_helpers.programs["xdp_helpers"]) as trace:
        for cpu in (1, 0, 1):
            _run_on(on_cpu, xdp_helpers, cpu)
    assert [h.cpu for h in trace.hits] == [1, 0, 1], str(trace)
    assert all(Trace(hits=[h]).called("bpf_csum_diff") for h in trace.hits), str(trace)


def test_lbr_capture_hits_on_both_cpus(on_cpu, xdp_helpers) -> None:
    events = perf.software_branch_events()
    with events:
        assert len(events.fds) == len(perf.online_cpus()) >= 2
    capture = LbrCapture(
        [parse_target("kfunc:write_null")], check=False, open_events=perf.software_branch_events
    )
    dev = os.open("/dev/null", os.O_WRONLY)
    try:
        capture.start()
        for cpu, size in ((1, 3), (0, 5), (1, 7)):
            on_cpu(cpu)
            assert os.write(dev, bytes(size)) == size
        trace = capture.stop()
    finally:
        capture.close()
        os.close(dev)
    assert [(h.cpu, h.retval) for h in trace.hits] == [(1, 3), (0, 5), (1, 7)], str(trace)


def test_snapshot_slot_of_each_cpu(on_cpu) -> None:
    with HookSet([parse_target("tp:syscalls/sys_enter_getppid")], snapshot=True) as hooks:
        for cpu in (1, 0, 1, 1):
            on_cpu(cpu)
            os.getppid()
        hits = [h for h in hooks.drain() if h.pid == os.getpid()]
        assert hooks.lost == 0
    assert [h.cpu for h in hits] == [1, 0, 1, 1]
    if os.path.exists("/sys/bus/event_source/devices/cpu/caps/branches"):
        assert all(h.snapshot_ret > 0 for h in hits)
    else:  # no PMU in a TCG guest: the helper says so on every CPU
        assert [h.snapshot_ret for h in hits] == [-errno.ENOENT] * 4
