"""The one control-flow rule for tail calls (issue 52), on the running kernel's own
translation of a program: a tail call ends its block, and what follows it runs only
after it (when the call finds no program). Coverage and the graph backend's implied
calls read blocks from `bytecode.flow`; before it they disagreed here (coverage ended
a block at a tail call, the implied-call engine did not). tests/bytecode/test_flow.py
checks the same rule on translations saved from both guests; this checks it live."""

from __future__ import annotations

import pytest

from pytest_lbr.bytecode.flow import control_flow, main_calls
from pytest_lbr.bytecode.instructions import decode_insns, is_tail_call
from pytest_lbr.kernel.helpers import xlated_insns
from tests.bpf.objects import require_root
from tests.kernel.test_call_sites import TAIL_LOOP

pytestmark = pytest.mark.kernel


def test_a_tail_call_ends_its_block_in_the_kernels_translation() -> None:
    require_root()
    from pytest_lbr.bpf import BpfObject

    with BpfObject(TAIL_LOOP) as obj:
        xlated = xlated_insns(obj.programs["entry"].fd)
    flow = control_flow(xlated)
    tails = [i for i, ins in enumerate(decode_insns(xlated)) if is_tail_call(ins)]
    assert len(tails) == 1, "entry's bpf_tail_call is not in the kernel's translation"
    (tail,) = tails
    block = flow.blocks[flow.block_of[tail]]
    assert block.end == tail + 1  # the tail call is its block's last instruction
    after = flow.block_of[tail + 1]
    assert after >= 0 and after != flow.block_of[tail]
    assert flow.ran_before(tail + 1, tail)
    # The same rule where calls are read: the tail call is one of entry's calls, and a
    # call after it (none here) could only be dominated by it.
    assert tail in main_calls(xlated)
