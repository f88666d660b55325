"""The graph backend's hits for a program that runs in softirq (scope="system"): an
XDP program attached to a veth, run by the NAPI poll, with a timer hardirq coming in
in the middle of one run. Real records from the 6.12 guest
(tests/data/ftrace-6.12-veth_xdp_softirq.txt, examples/veth_xdp in driver mode).

The hardirq is not the run's work: its calls must not nest into the run (they cut
it into two hits, the second taking in the rest of the NAPI poll) and must not show
in the hit; it is a context of its own, whose hits are in interrupt context too.
"""

from __future__ import annotations

from pathlib import Path

from pytest_lbr.capture.graph.hits import build_hits
from pytest_lbr.capture.graph.text import FunctionRecord, parse_trace
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_target

DATA = Path(__file__).parent / "data" / "ftrace-6.12-veth_xdp_softirq.txt"
PROG = "bpf_prog_a2ad03a2a7366944_veth_xdp"
XDP_PASS = 2


def _records() -> list:
    return parse_trace(DATA.read_text())


def _exits(records: list) -> dict[int, list[RawHit]]:
    """The fexit hook's records, as the hook sent them: one per run, timed where the
    hook read the clock (its bpf_ktime_get_ns call)."""
    times = [
        r.ts_ns
        for r in records
        if isinstance(r, FunctionRecord)
        and r.func == "bpf_ktime_get_ns"
        and (r.parent or "").endswith("_lbr_fexit")
    ]
    assert len(times) == 2, "the data holds two runs"
    return {0: [RawHit(0, 0, 286, 286, t, XDP_PASS, -2) for t in times]}


def _trace(records: list, targets: list[str], exits: bool = True) -> Trace:
    parsed = [parse_target(t) for t in targets]
    matchers = [
        (lambda f, a: f == PROG) if t.kind == "prog" else (lambda f, a, t=t: f == t.function)
        for t in parsed
    ]
    hits = build_hits(
        parsed, matchers, {}, {}, records, exits=_exits(records) if exits else None,
        interrupts=True,
    )  # fmt: skip
    return Trace(hits=hits)


def test_the_data_has_a_hardirq_inside_the_first_run() -> None:
    records = [r for r in _records() if isinstance(r, FunctionRecord)]
    names = [r.func for r in records]
    first = names.index("bpf_csum_diff")
    assert names[first + 1] == "irq_enter_rcu" and records[first + 1].in_irq
    assert names.index("hrtimer_interrupt") < names.index("csum_partial")


def test_one_hit_per_run_in_interrupt_context() -> None:
    trace = _trace(_records(), ["prog:name:veth_xdp"])
    assert len(trace.hits) == 2, str(trace)
    for hit in trace.hits:
        calls = [b.dst.symbol for b in hit.branches if b.kind == "call"]
        assert calls[:4] == [
            "bpf_csum_diff",
            "csum_partial",
            "__htab_map_lookup_elem",
            "lookup_nulls_elem_raw",
        ], str(trace)
        assert hit.retval == XDP_PASS and hit.in_interrupt, str(trace)
        assert (hit.pid, hit.tid, hit.comm, hit.cpu) == (286, 286, "python3", 0)
    # The first run inserted the counter, the second found it.
    first, second = ([b.dst.symbol for b in h.branches if b.kind == "call"] for h in trace.hits)
    assert "htab_map_update_elem" in first and "htab_map_update_elem" not in second


def test_the_hardirq_stays_out_of_the_run() -> None:
    trace = _trace(_records(), ["prog:name:veth_xdp"])
    first = trace.hits[0]
    for name in ("hrtimer_interrupt", "tick_nohz_handler", "sched_tick", "napi_gro_receive"):
        assert name not in first.functions(), str(trace)
    # The run ends where the program's last call returns, not in the NAPI poll.
    assert first.branches[-1].dst.symbol == PROG, str(trace)


def test_the_hardirq_is_a_context_of_its_own() -> None:
    trace = _trace(_records(), ["prog:name:veth_xdp", "kfunc:tick_nohz_handler"], exits=False)
    # Five timer ticks came in on the softirq (TCG's clock is slow): five hits.
    ticks = [h for h in trace.hits if h.target == "kfunc:tick_nohz_handler"]
    assert len(ticks) == 5 and all(h.in_interrupt for h in ticks), str(trace)
    assert "update_process_times" in ticks[0].functions(), str(trace)
    runs = [h for h in trace.hits if h.target == "prog:name:veth_xdp"]
    assert all("tick_nohz_handler" not in h.functions() for h in runs), str(trace)
