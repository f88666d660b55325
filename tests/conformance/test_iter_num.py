"""iter_num.bpf.c: open-coded numeric iterators (the kfuncs bpf_iter_num_new,
bpf_iter_num_next and bpf_iter_num_destroy, through bpf_for and bpf_repeat loops
written in the C) in a syscall program (SEC("syscall")), run from user space with
BPF_PROG_TEST_RUN on its own context: it sums the squares below ctx->n with
bpf_for, counts ctx->n runs of a bpf_repeat body, writes both back into the
context, returns the count and prints a line.

The kfuncs came with Linux 6.4: where the kernel's BTF lacks them, libbpf refuses
the object and the test skips with libbpf's words (tasks.load_kfunc_object).

The test runs the program with `prog.run(ctx=...)` while tracing it: the return
value, the context the kernel copied back and the printk line prove it ran both
loops n times; the trace has to show every kfunc by the name the C source wrote.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import assert_called, printk_lines
from tests.conformance.tasks import load_kfunc_object

PROG = "sum_squares"
#: struct squares_args: n, repeats, sum.
ARGS = struct.Struct("<iIQ")
N = 12
KFUNCS = ("bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy", "bpf_printk")


@pytest.mark.allow_skip  # Linux 6.1 has no numeric iterator (it came with 6.4)
@pytest.mark.program_type("syscall (iter_num kfuncs)")
def test_bpf_for_and_bpf_repeat_loop_with_numeric_iterators(bpf, lbr, built):
    obj = load_kfunc_object(bpf, built("iter_num"))
    prog = obj.programs[PROG]
    wanted = sum(i * i for i in range(N))

    with lbr.trace(prog) as trace:
        res = prog.run(ctx=ARGS.pack(N, 0, 0))

    assert res.retval == N, res
    assert res.ctx is not None and ARGS.unpack(res.ctx) == (N, N, wanted), res
    printed = [line.message for line in printk_lines() if line.tid == os.getpid()]
    assert f"iter_num: n={N} sum={wanted} repeats={N}" in printed, printed

    text = trace.edges()
    assert [h.target for h in trace.hits] == [f"prog:name:{PROG}"], text
    assert_called(trace, PROG, KFUNCS)
    assert "(unseen caller)" not in text, text
