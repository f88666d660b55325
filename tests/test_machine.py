"""The machine's facts come from one place (`pytest_lbr.kernel.machine`), the
architectures from one table (`pytest_lbr.kernel.arch`), and every backend's trace
carries the architecture of the machine it was made on."""

from __future__ import annotations

import os

import pytest

from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.lbr.decode import decode_trace
from pytest_lbr.kernel.arch import ARCHITECTURES, UnknownArchitecture, architecture
from pytest_lbr.kernel.machine import BTF_PATH, LBR_CAPS_PATH, Machine, machine
from pytest_lbr.kernel.perf import PERF_EVENT_OPEN_NR
from pytest_lbr.targets import parse_target


def test_an_lbr_trace_carries_the_architecture_of_its_machine() -> None:
    # An arm64 machine's facts: the trace must not say x86_64 (the old default).
    arm64 = Machine.of("arm64", release="6.12.0-1-arm64")
    target = parse_target("tp:syscalls/sys_enter_getppid")
    raw = RawHit(target=0, cpu=0, pid=1, tid=1, ts_ns=5, retval=None, snapshot_ret=0)
    trace, traced = decode_trace([target], [raw], [], arm64)
    assert trace.arch == "aarch64"
    assert trace.kernel_release == "6.12.0-1-arm64"
    assert [h.target for h in trace.hits] == [target.spec] and traced == {}


def test_every_spelling_of_an_architecture_finds_its_row() -> None:
    for arch in ARCHITECTURES:
        for name in (*arch.names, arch.name.upper()):
            assert architecture(name) is arch
    assert architecture("amd64").bpf == "x86"
    assert architecture("aarch64").debian == "arm64"
    with pytest.raises(UnknownArchitecture, match="unknown architecture 'sparc64'; known: x86_64"):
        architecture("sparc64")


def test_the_syscall_numbers_are_a_view_of_the_table() -> None:
    assert PERF_EVENT_OPEN_NR == {a.name: a.perf_event_open_nr for a in ARCHITECTURES}


def test_the_running_machine_facts_match_the_files_they_come_from() -> None:
    here = machine()
    assert machine() is here  # read once
    assert here.name == os.uname().machine and here.release == os.uname().release
    assert here.btf == BTF_PATH.exists()
    assert (here.lbr_caps is not None) == LBR_CAPS_PATH.exists()
    if here.arch is not None:
        assert here.arch is architecture()
