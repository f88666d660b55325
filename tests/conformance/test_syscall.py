"""syscall.bpf.c: a syscall program (SEC("syscall")), run from user space with
BPF_PROG_TEST_RUN and the caller's own struct as its context. It walks a hash map
user space filled with bpf_for_each_map_elem, sums the values of the keys up to
ctx->max_key into the context, returns how many it summed, and prints a line.

The test fills the map, runs the program with `prog.run(ctx=...)` while tracing it,
and checks the return value, the context the kernel copied back and the printk
line; the trace has to show both helpers by the names the C source wrote.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import assert_called, printk_lines

PROG = "sum_values"
#: struct sum_args: max_key, summed, sum.
ARGS = struct.Struct("<IIQ")
VALUES = {k: 10 * k + 1 for k in range(6)}  # 0:1, 1:11, ... 5:51
MAX_KEY = 3
HELPERS = ("bpf_for_each_map_elem", "bpf_printk")


@pytest.mark.program_type("syscall")
def test_syscall_program_sums_a_map(bpf, lbr, built):
    obj = bpf.load(built("syscall"))
    prog = obj.programs[PROG]
    for key, value in VALUES.items():
        obj.maps["values"].update(key, value)
    wanted = sum(v for k, v in VALUES.items() if k <= MAX_KEY)

    with lbr.trace(prog) as trace:
        res = prog.run(ctx=ARGS.pack(MAX_KEY, 0, 0))

    assert res.retval == MAX_KEY + 1, res
    assert res.ctx is not None and ARGS.unpack(res.ctx) == (MAX_KEY, MAX_KEY + 1, wanted), res
    printed = [line.message for line in printk_lines() if line.tid == os.getpid()]
    line = f"syscall: visited {len(VALUES)}, summed {MAX_KEY + 1}: {wanted}"
    assert line in printed, printed

    text = trace.edges()
    assert [h.target for h in trace.hits] == [f"prog:name:{PROG}"], text
    assert_called(trace, "sum_values", ("bpf_for_each_map_elem", "bpf_printk"))
    assert "(unseen caller)" not in text, text
