"""The counter rewrite keeps what a program does: real programs, loaded twice.

Each object is loaded as written and again with a counter per block
(`bytecode.instrument` through `bpf.counted`), and both copies run on the same
packets (BPF_PROG_TEST_RUN, on the host as root): verdicts, packets out and the
maps they write must be the same, for any packet Hypothesis finds. A register the
rewrite borrowed while it was live, a jump re-aimed one slot off or a spill over
the program's own stack would show here. tests/coverage/test_exact.py checks the
counts themselves against the programs' own counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_lbr.bpf import BpfLoader, BpfObject
from pytest_lbr.bytecode.flow import control_flow
from pytest_lbr.bytecode.instrument import instrument
from pytest_lbr.coverage.exact import ExactCoverage
from tests.bpf.objects import bpf_object, require_root

#: Programs whose verdict and packet depend on the packet alone (no clock, no coin).
DETERMINISTIC = {"xdp_helpers": ("xdp_helpers", "xdp_lru", "xdp_pass_with_a_long_name")}
#: many_arms' arms without a clock or a coin (8-15 call bpf_get_prandom_u32/ktime).
STEADY_ARMS = [*range(8), *range(16, 24)]


@pytest.fixture(scope="module")
def pairs() -> Iterator[dict[str, tuple[BpfObject, BpfObject]]]:
    """Object name -> (as written, counted)."""
    require_root()
    counted = ExactCoverage()
    with BpfLoader() as plain, BpfLoader(after_load=counted.after_load) as with_counters:
        out = {}
        for name in ("xdp_helpers", "many_arms", "pressure"):
            out[name] = (plain.load(bpf_object(name)), with_counters.load(bpf_object(name)))
        assert counted.problems == []
        assert len(counted.ids) == 6
        yield out
    counted.close()


def _maps(obj: BpfObject, names: tuple[str, ...]) -> dict[str, dict[bytes, bytes]]:
    out = {}
    for name in names:
        m = obj.maps[name]
        out[name] = {bytes(k): m.lookup(k) or b"" for k in m.keys()}
    return out


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    packet=st.binary(min_size=0, max_size=96), which=st.sampled_from(DETERMINISTIC["xdp_helpers"])
)
def test_counted_programs_do_what_the_written_ones_do(
    pairs: dict[str, tuple[BpfObject, BpfObject]], packet: bytes, which: str
) -> None:
    plain, counted = pairs["xdp_helpers"]
    packet = packet.ljust(14, b"\0")  # an Ethernet header at least
    want, got = plain.programs[which].run(packet), counted.programs[which].run(packet)
    assert (got.retval, got.data) == (want.retval, want.data)
    assert _maps(counted, ("counts", "recent")) == _maps(plain, ("counts", "recent"))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(packet=st.binary(min_size=16, max_size=64))
def test_a_counter_that_spills_gives_its_registers_back(
    pairs: dict[str, tuple[BpfObject, BpfObject]], packet: bytes
) -> None:
    """tests/bpf/pressure.bpf.c keeps nine values live over a join: its counters
    there spill two registers and fill them back; the verdict, a sum of all nine,
    must not change."""
    plain, counted = pairs["pressure"]
    want, got = plain.programs["pressure"].run(packet), counted.programs["pressure"].run(packet)
    assert got.retval == want.retval


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arm=st.sampled_from(STEADY_ARMS), rest=st.binary(min_size=13, max_size=64))
def test_every_arm_keeps_its_verdict(
    pairs: dict[str, tuple[BpfObject, BpfObject]], arm: int, rest: bytes
) -> None:
    plain, counted = pairs["many_arms"]
    packet = bytes([arm]) + rest
    want, got = plain.programs["many_arms"].run(packet), counted.programs["many_arms"].run(packet)
    assert (got.retval, got.data) == (want.retval, want.data)


def test_jumps_land_on_the_counter_that_opens_their_block(
    pairs: dict[str, tuple[BpfObject, BpfObject]],
) -> None:
    """Pure: every jump of the rewrite lands where the block it aimed at now starts
    (its counter), and every function starts at its entry block's counter."""
    import ctypes

    from pytest_lbr.bpf.libbpf import lib
    from pytest_lbr.bytecode.instructions import (
        LD_IMM64,
        decode_insns,
        function_starts,
        successors,
    )

    plain, _ = pairs["many_arms"]
    prog = plain.programs["many_arms"]
    raw = lib.bpf_program__insns(prog._ptr)  # noqa: SLF001 -- libbpf's own instructions
    insns = ctypes.string_at(raw, lib.bpf_program__insn_cnt(prog._ptr) * 8)  # noqa: SLF001
    starts = function_starts(insns)
    flow = control_flow(insns, starts)
    layout = instrument(insns, flow, map_fd=7)
    new = decode_insns(layout.insns)
    opens = {layout.record_at[blk.start] for blk in flow.blocks}
    assert layout.function_starts(starts)[0] == 0
    for i, ins in enumerate(new):
        if i and new[i - 1].code == LD_IMM64:
            continue
        for j in successors(ins, i):
            if j != i + (2 if ins.code == LD_IMM64 else 1):  # a jump, not a fall-through
                assert j in opens, f"the jump at {i} lands at {j}, inside a block"
    assert layout.counters == len(flow.blocks) + len(layout.fall_counters)


def test_the_pressure_program_spills() -> None:
    """The spill path is taken (else the test above would prove nothing of it)."""
    import ctypes

    from pytest_lbr.bpf.libbpf import lib
    from pytest_lbr.bytecode.instructions import function_starts

    require_root()
    with BpfLoader() as loader:
        prog = loader.load(bpf_object("pressure")).programs["pressure"]
        raw = lib.bpf_program__insns(prog._ptr)  # noqa: SLF001 -- libbpf's own instructions
        insns = ctypes.string_at(raw, lib.bpf_program__insn_cnt(prog._ptr) * 8)  # noqa: SLF001
    layout = instrument(insns, control_flow(insns, function_starts(insns)), map_fd=7)
    assert layout.spilled >= 1
