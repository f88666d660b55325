"""Two xdist workers tracing the same BPF program and the same kernel function at
once each get only their own hits, across 100 runs, in a guest.

The outer test loads tests/bpf/xdp_helpers.bpf.o, pins its program in bpffs and
runs an inner suite of 100 cases with `-n 2`. Each case traces, with the LBR
capture on software perf events (the guest has no PMU, see test_lifecycle.py),
both the pinned program and `kfunc:write_null` while it runs the program with
BPF_PROG_TEST_RUN and writes to /dev/null, then checks that every hit is its
own and that it has exactly the hits it caused. Each case also writes its time
window, so the outer test can show the two workers really traced at once.
"""

from __future__ import annotations

import os
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.bpf.libbpf import check_int, lib
from tests.bpf.objects import bpf_object
from tests.commands import PYTEST_QUIET

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

CASES = 100

INNER = textwrap.dedent(
    """
    import ctypes
    import os
    import threading
    import time

    import pytest

    from pytest_lbr.kernel import perf
    from pytest_lbr.capture.lbr.backend import LbrCapture
    from pytest_lbr.bpf.libbpf import bpf_test_run_opts, check_int, lib
    from pytest_lbr.targets import parse_target

    PIN = os.environ["LBR_CONCURRENCY_PIN"]
    WINDOWS = os.environ["LBR_CONCURRENCY_WINDOWS"]
    # xdp_helpers: a packet starting with 0xff is dropped, others pass.
    PACKETS = {bytes(range(1, 65)): 2, b"\\xff" + bytes(63): 1}


    def run(fd, packet):
        buf = ctypes.create_string_buffer(packet)
        out = ctypes.create_string_buffer(len(packet) + 256)
        opts = bpf_test_run_opts(
            sz=ctypes.sizeof(bpf_test_run_opts),
            data_in=ctypes.addressof(buf),
            data_size_in=len(packet),
            data_out=ctypes.addressof(out),
            data_size_out=len(out),
        )
        check_int(lib.bpf_prog_test_run_opts(fd, ctypes.byref(opts)), "test run")
        return opts.retval


    @pytest.mark.parametrize("case", range(__CASES__))
    def test_only_my_hits(case):
        fd = check_int(lib.bpf_obj_get(PIN.encode()), "bpf_obj_get")
        capture = LbrCapture(
            [parse_target("prog:pinned:" + PIN), parse_target("kfunc:write_null")],
            check=False,
            open_events=perf.software_branch_events,
        )
        # A different mix in every case: 1-3 runs, 1-4 writes of case-specific sizes.
        packets = [list(PACKETS)[(case + i) % 2] for i in range(1 + case % 3)]
        sizes = [1 + (case * 7 + i) % 50 for i in range(1 + case % 4)]
        dev = os.open("/dev/null", os.O_WRONLY)
        try:
            attached = time.monotonic_ns()
            capture.start()
            # Hooked and idle a while, so the other worker's cases run meanwhile
            # (attaching got fast: without it, 3 of 100 crossed in a 6.12 guest;
            # with 0.05 s, 7 of 100 in a CI run of 2026-11-29 whose two guests
            # shared the host's two cores).
            time.sleep(0.15)
            start = time.monotonic_ns()
            try:
                results = [run(fd, p) for p in packets]
                for n in sizes:
                    assert os.write(dev, bytes(n)) == n
            except BaseException:
                capture.close()
                raise
            end = time.monotonic_ns()
            trace = capture.stop()
            detached = time.monotonic_ns()
        finally:
            os.close(dev)
            os.close(fd)
        # When this worker's hooks were on (attached..detached) and when it ran
        # the program and wrote (start..end).
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(WINDOWS, worker), "a") as f:
            f.write(f"{attached} {start} {end} {detached} {os.getpid()}\\n")
        me = (os.getpid(), threading.get_native_id())
        assert [(h.pid, h.tid) for h in trace.hits] == [me] * len(trace.hits)
        prog_hits = [h.retval for h in trace.hits if h.target.startswith("prog:")]
        write_hits = [h.retval for h in trace.hits if h.target == "kfunc:write_null"]
        assert results == [PACKETS[p] for p in packets]
        assert prog_hits == results
        assert write_hits == sizes
        assert len(trace.hits) == len(packets) + len(sizes) and trace.lost == 0
    """
).replace("__CASES__", str(CASES))


def _inside(bodies: list[tuple[int, int]], hooked: list[tuple[int, int]]) -> int:
    """How many of `bodies` (start, end) ran wholly while some `hooked` window was on."""
    return sum(any(a <= s and e <= d for a, d in hooked) for s, e in bodies)


@pytest.mark.slow
@pytest.mark.one_kernel("6.12")
def test_two_workers_get_only_their_own_hits(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows = pytester.path / "windows"
    windows.mkdir()
    pin = Path(f"/sys/fs/bpf/pytest_lbr_concurrency_{os.getpid()}")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        check_int(lib.bpf_obj_pin(prog.fd, os.fsencode(pin)), f"pin {pin}")
    # The pin alone keeps the program loaded now: the workers reach it only through it.
    try:
        monkeypatch.setenv("LBR_CONCURRENCY_PIN", str(pin))
        monkeypatch.setenv("LBR_CONCURRENCY_WINDOWS", str(windows))
        pytester.makepyfile(test_inner=INNER)
        result = pytester.runpytest_subprocess(*PYTEST_QUIET, "-n", "2", "-q")
    finally:
        pin.unlink()
    out = result.stdout.str()
    result.assert_outcomes(passed=CASES)

    hooked: dict[str, list[tuple[int, int]]] = defaultdict(list)
    bodies: dict[str, list[tuple[int, int]]] = defaultdict(list)
    pids: dict[str, set[int]] = defaultdict(set)
    for path in windows.iterdir():
        for line in path.read_text().splitlines():
            attached, start, end, detached, pid = (int(x) for x in line.split())
            hooked[path.name].append((attached, detached))
            bodies[path.name].append((start, end))
            pids[path.name].add(pid)
    assert sorted(hooked) == ["gw0", "gw1"], out
    assert sum(len(w) for w in hooked.values()) == CASES
    assert pids["gw0"].isdisjoint(pids["gw1"])
    # The workers traced at the same time, not one after the other: many cases
    # ran the program and wrote while the other worker's hooks were on the same
    # program and function (and those hooks passed on none of it: the inner asserts).
    crossed = _inside(bodies["gw0"], hooked["gw1"]) + _inside(bodies["gw1"], hooked["gw0"])
    # Seen: 6.1 guest 99 of 100 (50 cases per worker); 6.12 guest 19 of 100 in a CI
    # run whose two guests shared the host's two cores (its vCPUs take turns on one
    # host thread, so how often the workers interleave is the scheduler's call).
    # A tenth still shows the workers traced side by side, not one after the other.
    assert crossed >= CASES // 10, (crossed, dict(hooked), dict(bodies))
