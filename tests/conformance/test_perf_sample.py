"""perf_sample.bpf.c: a sampling profiler's program (SEC("perf_event")) on the
software cpu-clock event of every CPU (`prog.attach_perf_event()`), filtering on
this process and taking its kernel stack with bpf_get_stack on each sample.

The test keeps a CPU busy in system calls for a while under the trace; the
program's sample count proves it ran on our samples, and the trace has to show
its helpers by the names the C source wrote. A sample runs in the timer
interrupt, so the trace is system-wide (it includes interrupt context).
"""

from __future__ import annotations

import os
import struct
import time

import pytest

from tests.conformance.evidence import assert_called, section_map

PROG = "on_sample"
HELPERS = ("bpf_get_current_pid_tgid", "bpf_get_stack")


def busy(seconds: float) -> None:
    """Spend `seconds` of CPU, much of it in the kernel (where a sample has a stack)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        os.stat("/")


@pytest.mark.program_type("perf_event")
def test_perf_event_program_samples_our_process(bpf, lbr, built):
    obj = bpf.load(built("perf_sample"))
    prog = obj.programs[PROG]
    bss = section_map(obj, ".bss")
    bss.update(0, struct.pack("<I", os.getpid()) + bytes(len(bss[0]) - 4))

    with prog.attach_perf_event("cpu-clock", frequency=200):
        with lbr.trace(prog, scope="system") as trace:
            busy(1.0)
    samples, deepest = struct.unpack_from("<QQ", bss[0], 8)

    assert samples > 0
    assert deepest > 0  # a kernel stack was taken
    text = trace.edges()
    assert [h for h in trace.hits if h.pid == os.getpid()], text
    assert_called(trace, PROG, ("bpf_get_current_pid_tgid", "bpf_get_stack"))
    assert "(unseen caller)" not in text, text


def test_a_program_of_another_type_is_refused_in_one_line(bpf, built):
    obj = bpf.load(built("sockets"))
    with pytest.raises(OSError, match=r'not perf_event \(SEC\("perf_event"\) makes one\)'):
        obj.programs["on_msg"].attach_perf_event()
