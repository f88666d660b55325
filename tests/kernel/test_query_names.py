"""Answers that depend only on the trace: helper names whatever ran before, names as
the C wrote them, no query about an unknown name, removed calls are not inlined (guest).

One session traces a program loaded by bcc with hash-map calls and programs loaded
with the `bpf` fixture with the same calls (tests/bpf/long_names.bpf.c: a tracepoint
program and an XDP program with `__noinline` subprograms, names of 16 bytes and
more, calls a frozen `const volatile` switches off), in both orders: a fact learnt
from one program must never rename another's calls.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr.model import Trace, TraceQueryError
from tests.bpf.objects import BUILD_DIR

pytestmark = pytest.mark.kernel

OBJ = BUILD_DIR / "long_names.bpf.o"
TP_PROG = "getppid_counter_with_long_name"  # 30 bytes: the kernel keeps "getppid_counter"
XDP_PROG = "xdp_counts_packet_lengths"  # the kernel keeps "xdp_counts_pack"
SUBPROG = "remember_packet_length"
MAP_CALLS = ("bpf_map_lookup_elem", "bpf_map_update_elem")

BCC_SRC = r"""
BPF_HASH(getppid_calls, u32, u64, 64);

TRACEPOINT_PROBE(syscalls, sys_enter_getppid)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 *seen = getppid_calls.lookup(&tgid);
    u64 count = seen ? *seen + 1 : 1;

    getppid_calls.update(&tgid, &count);
    return 0;
}
"""
BCC_PROG = "tracepoint__syscalls__sys_enter_getppid"


def bcc_module() -> Any:
    bcc = pytest.importorskip("bcc", reason="python3-bpfcc is not installed (ci/setup installs it)")
    build = Path(f"/lib/modules/{os.uname().release}/build")
    if not build.is_dir():
        pytest.skip(f"bcc needs kernel headers at {build}")
    return bcc


def trace_bcc(lbr: Any) -> Trace:
    """The bcc program, attached by bcc, traced while this process calls getppid."""
    bcc = bcc_module()
    b = bcc.BPF(text=BCC_SRC)  # TRACEPOINT_PROBE attaches on load
    try:
        fn = b.load_func(BCC_PROG, bcc.BPF.TRACEPOINT)
        with lbr.trace(fn) as trace:
            os.getppid()
        return trace
    finally:
        b.cleanup()


def trace_ours(bpf: Any, lbr: Any) -> tuple[Trace, Trace]:
    """Our tracepoint program (attached) while this process calls getppid, and our
    XDP program run on one packet."""
    obj = bpf.load(OBJ)
    tp = obj.programs[TP_PROG]
    with tp.attach():
        with lbr.trace(tp) as tp_trace:
            os.getppid()
    xdp = obj.programs[XDP_PROG]
    with lbr.trace(xdp) as xdp_trace:
        assert xdp.run(data=bytes(64)).retval == 2  # XDP_PASS
    return tp_trace, xdp_trace


def assert_named_as_written(trace: Trace, by: str) -> None:
    text = trace.edges()
    for helper in MAP_CALLS:
        assert trace.called(helper, by=by), f"{helper} by {by}:\n{text}"
    # The kernel's map functions carry the helper's name on this call.
    shown = [b.dst.label for b in trace.calls() if b.src.symbol == by]
    assert any("[bpf_map_update_elem]" in s for s in shown), shown


@pytest.mark.slow
@pytest.mark.parametrize("order", ["bcc first", "bpf fixture first"])
def test_helper_names_do_not_depend_on_what_was_traced_before(bpf, lbr, order):
    if order == "bcc first":
        bcc_trace = trace_bcc(lbr)
        tp_trace, xdp_trace = trace_ours(bpf, lbr)
    else:
        tp_trace, xdp_trace = trace_ours(bpf, lbr)
        bcc_trace = trace_bcc(lbr)
    assert_named_as_written(tp_trace, TP_PROG)
    assert_named_as_written(xdp_trace, SUBPROG)
    # bcc's program: its instructions as written are unknown to us; the map types'
    # ops name its rewritten calls all the same.
    bcc_by = next(iter(bcc_trace.programs()))
    assert bcc_by in (BCC_PROG, BCC_PROG[:15]), bcc_trace.programs()
    assert_named_as_written(bcc_trace, bcc_by)
    assert bcc_trace.called("bpf_map_update_elem", by=BCC_PROG)


def test_long_names_match_in_full_and_by_the_kernel_s_15_bytes(bpf, lbr):
    tp_trace, xdp_trace = trace_ours(bpf, lbr)
    assert set(tp_trace.programs()) == {TP_PROG}, tp_trace.programs()
    assert set(xdp_trace.programs()) == {XDP_PROG}, xdp_trace.programs()
    prog = tp_trace.programs()[TP_PROG]
    assert prog.kernel_name == TP_PROG[:15]
    for by in (TP_PROG, TP_PROG[:15]):
        assert tp_trace.called("bpf_map_update_elem", by=by), by
        assert tp_trace.inlined("bpf_jiffies64", by=by), prog.calls
    for by in (XDP_PROG, XDP_PROG[:15]):
        assert not xdp_trace.inlined("bpf_printk", by=by)
        assert xdp_trace.removed("bpf_printk", by=by)


def test_calls_a_frozen_const_volatile_switches_off_are_removed_not_inlined(bpf, lbr):
    tp_trace, _ = trace_ours(bpf, lbr)
    prog = tp_trace.programs()[TP_PROG]
    fates = {c.helper: c.fate for c in prog.calls}
    assert fates["bpf_get_current_comm"] == "removed", prog.calls
    assert fates["bpf_trace_printk"] == "removed", prog.calls
    assert fates["bpf_jiffies64"] == "inlined", prog.calls
    series = tuple(int(x) for x in os.uname().release.split(".")[:2])
    # bpf_get_smp_processor_id: inlined by the x86-64 verifier from v6.10.
    smp = "inlined" if series >= (6, 10) and os.uname().machine == "x86_64" else "call"
    assert fates["bpf_get_smp_processor_id"] == smp, prog.calls
    for helper in ("bpf_get_current_comm", "bpf_printk"):
        assert not tp_trace.inlined(helper, by=TP_PROG), helper
        assert tp_trace.removed(helper, by=TP_PROG), helper
    assert "bpf_get_current_comm, bpf_trace_printk removed by the verifier as unreachable" in str(
        tp_trace
    )


@pytest.mark.slow
def test_a_query_about_an_unknown_name_raises(bpf, lbr):
    tp_trace, _ = trace_ours(bpf, lbr)
    with pytest.raises(TraceQueryError, match="no_such_function"):
        tp_trace.called("bpf_map_update_elem", by="no_such_function")
    with pytest.raises(TraceQueryError, match="nearest: bpf_map_lookup_elem"):
        tp_trace.called("bpf_map_lokup_elem")
    with pytest.raises(TraceQueryError):
        tp_trace.inlined("bpf_jiffies64", by="getppid_counter_typo")
    with pytest.raises(TraceQueryError):
        tp_trace.has_path(TP_PROG, "htab_map_updat_elem")
    # A real helper this program does not call: False, not an error.
    assert not tp_trace.called("bpf_get_prandom_u32", by=TP_PROG)
    assert not tp_trace.called("bpf_get_prandom_u32")
    # A kernel function that exists and was not called from it: False.
    assert not tp_trace.called("tcp_v4_connect", by=TP_PROG)


def test_a_tracer_not_given_the_loader_s_book_knows_only_the_kernel_s_calls(bpf, lbr):
    """The `lbr` fixture's tracer is given the `bpf` fixture's book of what its programs
    were loaded from; without it a trace knows only the calls the kernel still makes,
    and neither answer depends on the other, asked in turn (issue 52)."""
    assert lbr.written is bpf.written
    xdp = bpf.load(OBJ).programs[XDP_PROG]
    traces = []
    for written in (bpf.written, None, bpf.written):
        lbr.written = written
        with lbr.trace(xdp) as trace:
            assert xdp.run(data=bytes(64)).retval == 2  # XDP_PASS
        traces.append(trace)
    told, untold, told_again = (t.programs()[XDP_PROG] for t in traces)
    assert told.written and told_again == told
    assert traces[0].removed("bpf_printk", by=XDP_PROG)
    assert not untold.written
    with pytest.raises(TraceQueryError, match="loaded outside the bpf fixture"):
        traces[1].removed("bpf_printk", by=XDP_PROG)
