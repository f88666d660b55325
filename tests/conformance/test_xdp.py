"""xdp.bpf.c: an XDP program attached for real to the host end of a veth pair
(`prog.attach_xdp(interface)`), counting UDP datagrams to one port and arming a
one-shot bpf_timer (kept in a hash map's value, one per flow) for each; the timer's
callback, the BPF function on_timer, counts its runs in .bss and prints a line.

The test sends datagrams from the `veth` fixture's namespace to the host end and
waits until the callback has run. The program runs in the NAPI poll and the callback
from an hrtimer, both in softirq, so the trace is system-wide. The counters (packets
and timer runs) and the socket that received every datagram (XDP_PASS) prove it ran;
the trace has to show every helper by the name the C source wrote, the callback's
bpf_printk among them: a call is the function's that makes it, so the callback's is
asserted `by="on_timer"` (the trace names both as hits of the program xdp_timer).
"""

from __future__ import annotations

import socket
import time
from contextlib import closing

import pytest

from tests.conformance.evidence import (
    assert_called,
    called_table,
    global_vars,
    printk_lines,
    set_global,
)

PROG = "xdp_timer"
PORT = 4243
DATAGRAMS = 3
HELPERS = (
    "bpf_map_lookup_elem",
    "bpf_map_update_elem",
    "bpf_timer_init",
    "bpf_timer_set_callback",
    "bpf_timer_start",
)
CALLBACK, CALLBACK_HELPERS = "on_timer", ("bpf_printk",)


def counters(obj) -> dict[str, int]:
    return {
        name: int.from_bytes(raw, "little")
        for name, raw in global_vars(obj).items()
        if name in ("packets", "timer_runs")
    }


@pytest.mark.program_type("xdp (bpf_timer)")
def test_xdp_on_a_veth_arms_a_timer_whose_callback_runs(bpf, lbr, built, veth):
    obj = bpf.load(built("xdp"))
    prog = obj.programs[PROG]
    set_global(obj, "port", PORT)
    prog.attach_xdp(veth.host.name)

    with closing(veth.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(10)
        with lbr.trace(prog, scope="system") as trace:
            for i in range(DATAGRAMS):
                tx.sendto(b"xdp %d" % i, (veth.host.addr, PORT))
                assert rx.recv(64) == b"xdp %d" % i  # XDP_PASS
            deadline = time.monotonic() + 10
            while counters(obj)["timer_runs"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # the 1 ms timer fires in softirq
            time.sleep(0.05)  # a last restart of the timer runs out
    seen = counters(obj)

    assert seen["packets"] == DATAGRAMS, seen
    assert 1 <= seen["timer_runs"] <= DATAGRAMS, seen  # a restart before it fired: fewer
    printed = [line.message for line in printk_lines()]
    assert "xdp timer: run 1" in printed, printed

    text = trace.edges()
    assert [h for h in trace.hits if h.in_interrupt], text  # softirq, both of them
    assert_called(trace, PROG, HELPERS)
    if not trace.no_branches:  # the callback's runs are hits of xdp_timer
        print(called_table(trace, CALLBACK, CALLBACK_HELPERS))  # shown with a failure
        assert trace.called("bpf_printk", by="on_timer"), text
    assert "(unseen caller)" not in text, text
