"""A session keeps the fexit hook on a traced program of a `BpfObject` (graph: for
its return values; lbr: the trace itself): attached at the program's first trace,
switched off between traces, released when the object closes or the session
ends. Programs of other loaders get a hook per trace."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture.hooks import program_exits
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import XDP_DROP, XDP_HELPERS_DROP_BYTE, XDP_PASS, bpf_object
from tests.kernel.kernel_state import bpf_ids

pytestmark = pytest.mark.kernel

PASS = bytes(range(1, 65))
DROP = bytes([XDP_HELPERS_DROP_BYTE]) + bytes(63)

#: (backend, pmu): the graph backend and the LBR path on software perf events.
BACKENDS = [("graph", "hardware"), ("lbr", "software")]


# One tracer per backend for the module's tests that need only a tracer, as a pytest
# session has one: the graph backend turns the function tracer on and off once
# (patching every call site), not once per test. Tests of a session's own start and end make theirs.
@pytest.fixture(scope="module", params=BACKENDS, ids=[b for b, _ in BACKENDS])
def tracer(request: pytest.FixtureRequest) -> Iterator[Tracer]:
    backend, pmu = request.param
    with Tracer(backend=backend, pmu=pmu) as tracer:
        yield tracer


def test_one_hook_per_program_for_the_session_and_only_each_traces_runs(tracer: Tracer) -> None:
    links_before = bpf_ids("link")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        seen = []
        for data, verdict in ((PASS, XDP_PASS), (DROP, XDP_DROP), (PASS, XDP_PASS)):
            # Runs between traces: the kept hook is attached but switched off.
            assert prog.run(data=DROP, repeat=3).retval == XDP_DROP
            with tracer.trace(prog) as trace:
                assert prog.run(data=data).retval == verdict
            assert [h.retval for h in trace.hits] == [verdict], str(trace)
            assert trace.lost == 0
            seen.append(bpf_ids("link") - links_before)
        # The same one fexit link after every trace: attached once, kept.
        assert len(seen[0]) == 1 and seen == [seen[0]] * 3, seen
    # Closing the object released its hook, the session still open (a test's
    # teardown may check that nothing is left: examples/veth_xdp).
    assert bpf_ids("link") == links_before


@pytest.mark.slow
def test_closing_the_session_releases_the_hooks() -> None:
    links_before = bpf_ids("link")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        with Tracer(backend="graph") as tracer:
            with tracer.trace(prog):
                prog.run(data=PASS)
            assert len(bpf_ids("link") - links_before) == 1
        assert bpf_ids("link") == links_before


def test_a_program_named_by_id_gets_a_hook_per_trace(tracer: Tracer) -> None:
    """No object tells when such a program goes: nothing may outlive the trace."""
    links_before = bpf_ids("link")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        for _ in range(2):
            with tracer.trace(prog.id) as trace:
                assert prog.run(data=PASS).retval == XDP_PASS
            assert [h.retval for h in trace.hits] == [XDP_PASS], str(trace)
            assert bpf_ids("link") == links_before


@pytest.mark.slow
def test_an_object_closed_during_a_trace_loses_its_hook_at_the_trace_end() -> None:
    links_before = bpf_ids("link")
    with Tracer(backend="graph") as tracer:
        obj = BpfLoader().load(bpf_object("xdp_helpers"))
        prog = obj.programs["xdp_helpers"]
        with tracer.trace(prog) as trace:
            assert prog.run(data=PASS).retval == XDP_PASS
            obj.close()
        assert [h.retval for h in trace.hits] == [XDP_PASS], str(trace)
        assert bpf_ids("link") == links_before


@pytest.mark.slow
def test_a_session_keeps_a_bounded_number_of_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(program_exits, "KEPT_PROGRAMS", 1)
    links_before = bpf_ids("link")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        progs = [obj.programs["xdp_helpers"], obj.programs["xdp_pass_with_a_long_name"]]
        with Tracer(backend="graph") as tracer:
            for prog in progs * 2:
                with tracer.trace(prog) as trace:
                    assert prog.run(data=PASS).retval == XDP_PASS
                assert [h.retval for h in trace.hits] == [XDP_PASS], str(trace)
                assert len(bpf_ids("link") - links_before) == 1  # the last program's only
    gc.collect()
    assert bpf_ids("link") == links_before


@pytest.mark.slow
@pytest.mark.parametrize("kept", [0, 4])
def test_two_programs_in_one_trace_get_their_own_return_values(
    monkeypatch: pytest.MonkeyPatch, tracer: Tracer, kept: int
) -> None:
    monkeypatch.setattr(program_exits, "KEPT_PROGRAMS", kept)
    links_before = bpf_ids("link")
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        helpers, passing = obj.programs["xdp_helpers"], obj.programs["xdp_pass_with_a_long_name"]
        for _ in range(2):  # the second trace takes both hooks from the session
            with tracer.trace(helpers, passing) as trace:
                assert helpers.run(data=DROP).retval == XDP_DROP
                assert passing.run(data=PASS).retval == XDP_PASS
            by_target = {h.target: h.retval for h in trace.hits}
            assert len(trace.hits) == 2 and by_target == {
                "prog:name:xdp_helpers": XDP_DROP,
                "prog:name:xdp_pass_with_a_long_name": XDP_PASS,
            }, str(trace)
            # Hits in the order the programs ran, one ring buffer per program.
            assert [h.target for h in trace.hits] == [
                "prog:name:xdp_helpers",
                "prog:name:xdp_pass_with_a_long_name",
            ]
            if not kept:  # nothing is left after a trace
                assert bpf_ids("link") == links_before
    assert bpf_ids("link") == links_before
