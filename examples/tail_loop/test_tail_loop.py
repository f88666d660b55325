"""Program-to-program flow: an inlined bpf_loop, a global subprogram, a tail call.

The verifier of both 6.1 and 6.12 inlines bpf_loop() (Linux kernel commit
1ade23711971 ("bpf: Inline calls to bpf_loop when callback is known") (in
v6.0)): no call of bpf_loop is left, only calls of its callback. A test says
so with `trace.inlined`, and a failed `called("bpf_loop")` explains it.
"""

import re

import pytest
from packets import eth, ipv4, udp

from pytest_lbr.assertions import why_false

XDP_PASS = 2
packet = eth(ipv4(udp(b"x")))


@pytest.fixture
def tail_loop(bpf, built):
    obj = bpf.load(built("tail_loop"))
    obj.maps["stages"].update(0, obj.programs["stage2"].fd)  # slot 0: stage2
    return obj


def test_inlined_loop_subprogram_and_tail_call(tail_loop, lbr):
    entry = tail_loop.programs["entry"]
    with lbr.trace(entry) as trace:
        assert entry.run(data=packet).retval == XDP_PASS  # stage2's verdict

    assert trace.inlined("bpf_loop", by="entry")
    assert not trace.called("bpf_loop")
    assert trace.called("bpf_get_prandom_u32", by="loop_cb")
    assert trace.called("bpf_ktime_get_ns", by="sub_stamp")
    # The tail call reads as one, and counts as entry calling stage2.
    assert re.search(r"^  stage2 \(tail call from entry\)", str(trace), re.M), str(trace)
    assert re.search(r"^entry -> stage2\+0x0 .*\(tail call\)$", trace.edges(), re.M)
    assert trace.called("stage2", by="entry")
    assert trace.called("bpf_get_prandom_u32", by="stage2")


def test_a_failed_called_names_the_inlining(tail_loop, lbr):
    entry = tail_loop.programs["entry"]
    with lbr.trace(entry) as trace:
        entry.run(data=packet)

    text = why_false(trace, "called", "bpf_loop", by="entry")
    assert text is not None
    assert "bpf_loop: inlined by this kernel's verifier in entry" in text
    # loop_cb runs LOOPS (2) times, calling bpf_get_prandom_u32 once each time.
    assert "its callback loop_cb made 2 call(s) in this trace" in text
    # Then the call tree around entry: where loop_cb's calls were made.
    tree = text[text.index("Hit at ") :].splitlines()[1:]
    assert tree[-1].startswith("(the whole trace:"), text
    assert 0 < len(tree) - 1 <= 40 and tree[0].startswith("entry"), text
    assert "  loop_cb (entry not recorded)" in tree, text
    called = "    bpf_get_prandom_u32 \u2192 bpf_user_rnd_u32 \u00d72"
    assert any(line.startswith(called) for line in tree), text


def test_tracing_the_tail_call_target(tail_loop, lbr):
    entry, stage2 = tail_loop.programs["entry"], tail_loop.programs["stage2"]
    with lbr.trace(stage2) as trace:
        entry.run(data=packet)
    # Both 6.1 and 6.12 run stage2's trampoline when entry tail-calls it.
    assert len(trace.hits) == 1
    assert trace.called("bpf_get_prandom_u32", by="stage2")
