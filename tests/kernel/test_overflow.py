"""Loss is never silent: a ring-buffer overflow shows in `trace.lost` as exactly
the hits that were not delivered, and a golden check refuses an incomplete trace.

The truth is the traced program's own count of its runs (xdp_helpers counts
every packet in its `counts` map). The LBR path runs on software-clock perf
events (no PMU in the TCG guests), so hits carry no branches but go through the
real tracer, ring buffer and lost counter. `Tracer.trace` reads the ring buffer
when the block ends, so it holds a few thousand hits; 12,000 runs overflow it.
"""

from __future__ import annotations

import struct
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture import Scope
from pytest_lbr.capture.lbr.backend import LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_targets
from tests.bpf.objects import bpf_object
from tests.commands import PYTEST_QUIET

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

PACKET = bytes([0x01]) + bytes(63)
REPO = Path(__file__).resolve().parents[2]


def _count(counts: Any) -> int:
    # A repeated test run reuses the packet the program rewrote: count every key.
    return sum(struct.unpack("<Q", v)[0] for _, v in counts.items())


def traced_runs(runs: int, scope: Scope | None = None) -> tuple[Trace, int]:
    """(trace, true number of runs) for `runs` runs of xdp_helpers under the LBR path."""
    with BpfLoader() as bpf:
        obj = bpf.load(bpf_object("xdp_helpers"))
        prog, counts = obj.programs["xdp_helpers"], obj.maps["counts"]
        before = _count(counts)
        capture = LbrCapture(
            parse_targets([prog]),
            check=False,
            open_events=perf.software_branch_events,
            scope=scope,
        )
        try:
            capture.start()
            prog.run(data=PACKET, repeat=runs)
            trace = capture.stop()
        finally:
            capture.close()
        return trace, _count(counts) - before


@pytest.mark.parametrize("runs", [500, 12_000])
def test_lost_is_exactly_the_hits_not_delivered(runs: int) -> None:
    trace, truth = traced_runs(runs)
    assert truth == runs
    assert trace.lost == truth - len(trace.hits), (trace.lost, truth, len(trace.hits))
    if runs == 500:
        assert trace.lost == 0
    else:
        assert trace.lost > 0, "12,000 runs did not overflow the ring buffer: nothing tested"


def test_system_wide_burst_counts_what_it_drops() -> None:
    """scope="system" (no tgid filter in the hooks) while another process keeps a
    CPU busy writing: the burst overflows and `lost` is still exactly the loss."""
    busy = subprocess.Popen(["sh", "-c", "while :; do echo x >/dev/null; done"])
    try:
        trace, truth = traced_runs(12_000, Scope.of("system"))
    finally:
        busy.kill()
        busy.wait()
    assert truth == 12_000
    assert trace.lost > 0, "12,000 runs did not overflow the ring buffer: nothing tested"
    assert trace.lost == truth - len(trace.hits), (trace.lost, truth, len(trace.hits))


@pytest.mark.slow
def test_golden_check_of_an_incomplete_trace_says_so(pytester: pytest.Pytester) -> None:
    # The inner session imports traced_runs from this repository's tests.
    pytester.makeconftest(f"import sys\nsys.path.append({str(REPO)!r})\n")
    pytester.makepyfile(
        test_loss=textwrap.dedent("""
        from tests.kernel.test_overflow import traced_runs

        def test_overflowed(lbr_golden):
            trace, _ = traced_runs(12_000)
            assert trace.lost > 0
            lbr_golden(trace)
        """)
    )
    result = pytester.runpytest_subprocess(*PYTEST_QUIET)
    out = result.stdout.str()
    assert result.ret == 1, f"{out}\n{result.stderr.str()}"
    result.assert_outcomes(failed=1)
    assert "records: a golden comparison would be unreliable" in out, out
    assert "trace lost " in out
    # Nothing was written: a golden file never records an incomplete trace.
    assert not list(pytester.path.rglob("*.lbr"))
