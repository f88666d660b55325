"""A program's facts are worked out once, and a new program costs no re-read of
kallsyms (issue 54).

Most suites load a program per test. What a trace needs to know about a program
(its line and call tables, its control flow) is read once per program and reused
by every later trace of it; a newly loaded program is learnt from its own info
(`bpf_obj_get_info_by_fd`), and the trampoline of its return hook is bounded by its
page: neither re-reads /proc/kallsyms, the whole file (under emulation most of a
trace's cost). `KernelSymbols.read_at` changes only when the file is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pytest_lbr.bpf import BpfLoader, Program
from pytest_lbr.capture.implied import flow_of, flows_worked_out, program_flow, shapes_worked_out
from pytest_lbr.kernel.functions import filter_functions_text
from pytest_lbr.kernel.tracefs import find_tracefs
from pytest_lbr.model import Location, Trace
from pytest_lbr.programs.written import WrittenPrograms
from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.kallsyms import live_kallsyms
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import bpf_object

pytestmark = pytest.mark.kernel

#: An Ethernet-sized packet xdp_helpers passes (its first byte is not the drop byte).
PACKET = bytes([0x01]) + bytes(63)
XDP_PASS = 2


@pytest.fixture
def graph() -> Iterator[Tracer]:
    """A graph-backend tracer of its own (the facts below are the graph backend's)."""
    with Tracer(backend="graph", written=WrittenPrograms()) as tracer:
        tracer.prepare()
        yield tracer


def traced_run(tracer: Tracer, prog: Program) -> Trace:
    with tracer.trace(prog) as trace:
        assert prog.run(data=PACKET).retval == XDP_PASS
    return trace


def in_program(trace: Trace, function: str) -> list[Location]:
    """The branch ends in `function` of the traced program (the function tracer
    records no call into a BPF subprogram: its calls out name it)."""
    ends = [loc for h in trace.hits for b in h.branches for loc in (b.src, b.dst)]
    return [loc for loc in ends if loc.symbol == function and loc.program is not None]


def named_from_its_tables(trace: Trace) -> None:
    """Its functions and lines from the program's tables, its helpers by the names
    its C wrote: as named as a trace of a program read anew."""
    for function in ("xdp_helpers", "note_cpu"):
        found = in_program(trace, function)
        assert found, f"no branch in {function}"
        assert all(loc.file and loc.file.endswith("xdp_helpers.bpf.c") for loc in found)
    assert trace.called("bpf_map_update_elem", by="xdp_helpers")
    assert trace.called("bpf_map_lookup_elem", by="xdp_helpers")


@pytest.mark.slow
def test_a_program_traced_twice_is_read_once(graph: Tracer) -> None:
    with BpfLoader(written=graph.written) as bpf:
        prog = bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
        traced_run(graph, prog)
        tables = get_symbolizer().bpf.programs[prog.id]
        flows, read_at = flows_worked_out(), live_kallsyms().read_at
        second = traced_run(graph, prog)
        assert get_symbolizer().bpf.programs[prog.id] is tables  # not read again
        assert flows_worked_out() == flows  # its control flow: not worked out again
        assert live_kallsyms().read_at == read_at  # nor kallsyms read again
    named_from_its_tables(second)


@pytest.mark.slow
def test_a_new_program_costs_no_read_of_kallsyms(graph: Tracer) -> None:
    with BpfLoader(
        written=graph.written
    ) as bpf:  # the session's first trace may read kallsyms: not counted
        traced_run(graph, bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"])
    read_at, flows = live_kallsyms().read_at, flows_worked_out()
    for _ in range(2):  # each a program loaded anew, with a new return hook
        with BpfLoader(written=graph.written) as bpf:
            prog = bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
            trace = traced_run(graph, prog)
            assert live_kallsyms().read_at == read_at
            named_from_its_tables(trace)  # from its own info all the same
    assert flows_worked_out() == flows + 2  # one per new program


@pytest.mark.slow
def test_a_program_loaded_again_has_its_helper_calls_worked_out_once(graph: Tracer) -> None:
    """A test's fixture loads the same object again: its program's helper calls are
    taken from the first load's (the same instructions, but for its maps' ids)."""
    seen = []
    for _ in range(2):
        with BpfLoader(written=graph.written) as bpf:
            prog = bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
            named_from_its_tables(traced_run(graph, prog))
            calls = get_symbolizer().bpf.programs[prog.id].calls
            assert calls is not None and calls.prog_id == prog.id
            seen.append((get_symbolizer().described, calls))
    (described, first), (described_again, again) = seen
    assert described_again == described  # not worked out again
    assert again == dataclasses.replace(first, prog_id=again.prog_id)


@pytest.mark.slow
def test_a_program_loaded_again_takes_its_flow_from_its_shape(graph: Tracer) -> None:
    """Its calls paired and named as its first load's were, moved to where its code
    is now: the same flow as worked out anew from its own code (before its trace:
    the session's return hook then patches its entry)."""
    available = filter_functions_text(find_tracefs() or "/sys/kernel/tracing")
    traceable = frozenset(n for n in available.splitlines() if n and " " not in n)
    shapes = []
    for _ in range(2):
        with BpfLoader(written=graph.written) as bpf:
            prog = bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
            anew = program_flow(prog.fd, traceable.__contains__, live_kallsyms())
            assert anew is not None and anew.sites
            named_from_its_tables(traced_run(graph, prog))
            shapes.append(shapes_worked_out())
            assert flow_of(prog.fd, available, (prog.id, prog.tag)) == anew  # the trace's
    assert shapes[1] == shapes[0]  # the second load's: not paired and named again
