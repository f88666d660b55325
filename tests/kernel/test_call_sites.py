"""Call sites read from a live JIT image: a program's own extent, learned from its
info, answers without reading /proc/kallsyms again.

The first test runs in the guests (/proc/kcore holds the image there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr.capture import call_sites
from pytest_lbr.capture.call_sites import CallSites, calls_in
from pytest_lbr.programs.info import program_details
from tests.bpf.objects import bpf_object, require_root

TAIL_LOOP = (
    Path(__file__).resolve().parents[2] / "examples" / "tail_loop" / "build" / "tail_loop.bpf.o"
)


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


@contextlib.contextmanager
def _tail_loop_sites() -> Iterator[tuple[Any, CallSites, Callable[[], list[int]]]]:
    """examples/tail_loop loaded, `entry`'s call sites learnt: (the object, the sites,
    the jumps from `entry` into `stage2` they read now)."""
    require_root()
    from pytest_lbr.bpf import BpfObject

    with BpfObject(TAIL_LOOP) as obj:
        entry, stage2 = obj.programs["entry"], obj.programs["stage2"]
        start, size = program_details(entry.fd).functions[0]
        stage2_start = program_details(stage2.fd).functions[0][0]
        sites = CallSites()
        sites.learn("bpf_prog_entry", start, size)

        def jumps_into_stage2() -> list[int]:
            calls = sites._calls("bpf_prog_entry", start, size)
            return [t for _, t in calls if stage2_start <= t < stage2_start + 64]

        yield obj, sites, jumps_into_stage2


@pytest.mark.kernel
def test_a_patched_tail_call_jump_is_read_as_it_is_now() -> None:
    """JIT code changes under its name and address: x86-64 makes a tail call with a
    constant slot a direct jump, which the kernel patches in when the program array
    gets a program and out when it loses it. What is read of JIT code is kept by what
    its bytes are, never by its name: a stale jump once made 6.1's tail call in
    examples/tail_loop read as a call from `entry` (a program loaded again, at its old
    address under the same name)."""
    with _tail_loop_sites() as (obj, sites, jumps_into_stage2):
        stage2 = obj.programs["stage2"]
        assert not jumps_into_stage2()  # an empty slot: no jump
        obj.maps["stages"].update(0, stage2.fd)
        assert jumps_into_stage2(), "the direct tail call's jump is patched in"
        obj.maps["stages"].delete(0)
        assert not jumps_into_stage2(), "a stale jump read from a cache"


@pytest.mark.kernel
def test_one_reading_reads_jit_code_once_and_the_next_reads_it_anew() -> None:
    """A trace's records are cut against one reading of the programs' code (the
    graph backend's `stop`): a jump patched in after it shows at the next reading."""
    with _tail_loop_sites() as (obj, sites, jumps_into_stage2):
        stage2 = obj.programs["stage2"]
        with sites.one_reading():
            assert not jumps_into_stage2()
            obj.maps["stages"].update(0, stage2.fd)
            assert not jumps_into_stage2(), "read once in one reading"
        with sites.one_reading():
            assert jumps_into_stage2(), "the next reading reads the code anew"
        assert jumps_into_stage2()  # and outside any reading, each time
        obj.maps["stages"].delete(0)
        assert not jumps_into_stage2()
