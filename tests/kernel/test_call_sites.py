"""Call sites read from a live JIT image: a program's own extent, learned from its
info, answers without reading /proc/kallsyms again.

The first test runs in the guests (/proc/kcore holds the image there).
"""

from __future__ import annotations

import pytest

from pytest_lbr.capture import call_sites
from pytest_lbr.capture.call_sites import CallSites, calls_in
from pytest_lbr.programs.info import program_details
from tests.bpf.objects import bpf_object, require_root


@pytest.mark.kernel
def test_a_learned_program_is_answered_from_its_own_extent() -> None:
    require_root()
    from pytest_lbr.bpf import BpfObject

    with BpfObject(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        details = program_details(prog.fd)
        start, size = details.functions[0]
        name = "bpf_prog_xdp_helpers"  # any name: what the trace's records call it
        calls = calls_in(name, start, size)
        assert calls, "no call found in the image read through /proc/kcore"
        ret, target = calls[0]
        sites = CallSites()
        sites.learn(name, start, size)
        assert sites(name, start, target) == (name, start, ret)
        assert sites._symbols is None  # kallsyms never read for it
        # Another name at that address (a freed image reused) is not answered from it.
        assert sites._function("bpf_prog_other", start) != (name, size)


def test_a_long_session_keeps_the_newest_programs_learned() -> None:
    limit = call_sites._MAX_LEARNED
    sites = CallSites()
    for i in range(limit + 10):
        sites.learn(f"bpf_prog_{i}", 0x1000 * (i + 1), 64)
    sites.learn("bpf_prog_0_again", 0x1000 * 11, 64)  # re-learned: kept as the newest
    sites.learn("bpf_prog_last", 0x1000 * (limit + 20), 64)
    assert len(sites._learned) == limit
    assert sites._function("bpf_prog_0_again", 0x1000 * 11) == ("bpf_prog_0_again", 64)
    assert sites._function("bpf_prog_last", 0x1000 * (limit + 20)) == ("bpf_prog_last", 64)
    assert 0x1000 not in sites._learned and 0x1000 * 12 not in sites._learned


@pytest.mark.kernel
def test_jit_code_is_read_anew_each_trace() -> None:
    """A program loaded again can come back at the same address under the same name
    (its tag), its subprograms and tail-call targets elsewhere (a direct tail call is a
    jump the kernel patches): what was read of JIT code is not kept past its trace, so a
    stale jump never makes a tail call read as a call (seen in 6.1: examples/tail_loop)."""
    require_root()
    from pytest_lbr.bpf import BpfObject

    with BpfObject(bpf_object("xdp_helpers")) as obj:
        start, size = program_details(obj.programs["xdp_helpers"].fd).functions[0]
        sites = CallSites()
        sites.learn("bpf_prog_xdp_helpers", start, size)
        first = sites._calls("bpf_prog_xdp_helpers", start, size)
        assert first and sites._calls("bpf_prog_xdp_helpers", start, size) is first
        sites.new_trace()
        again = sites._calls("bpf_prog_xdp_helpers", start, size)
        assert again == first and again is not first  # read again from the live image
