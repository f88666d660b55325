"""tc.bpf.c: a tc ingress filter (SEC("tc")) attached for real to the host end of a
veth pair (`prog.attach_tc(interface, direction="ingress")`), passing the head of each
UDP datagram to one port through a dynptr over a global buffer: bpf_skb_load_bytes,
then bpf_dynptr_from_mem, bpf_dynptr_write and bpf_dynptr_read (Linux >= 5.19, so
in both 6.1 and 6.12).

The test sends datagrams from the `veth` fixture's namespace to the host end; tc
ingress runs in softirq, so the trace is system-wide. The packet counter and the
last datagram's head as the program read it back out of the dynptr (`payload` in
.bss) prove it ran; the trace has to show every helper by the name the C source wrote.
"""

from __future__ import annotations

import socket
from contextlib import closing

import pytest

from tests.conformance.evidence import assert_called, global_vars, set_global

PROG = "tc_dynptr"
PORT = 4244
HEAD = 16
DATAGRAMS = [b"tc dynptr #%d: abcdefgh" % i for i in range(3)]
HELPERS = ("bpf_skb_load_bytes", "bpf_dynptr_from_mem", "bpf_dynptr_write", "bpf_dynptr_read")


@pytest.mark.program_type("tc (dynptr)")
def test_tc_ingress_copies_our_datagram_through_a_dynptr(bpf, lbr, built, veth):
    obj = bpf.load(built("tc"))
    prog = obj.programs[PROG]
    set_global(obj, "port", PORT)
    prog.attach_tc(veth.host.name, direction="ingress")

    with closing(veth.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(10)
        with lbr.trace(prog, scope="system") as trace:
            for datagram in DATAGRAMS:
                tx.sendto(datagram, (veth.host.addr, PORT))
                assert rx.recv(64) == datagram  # TC_ACT_OK
    seen = global_vars(obj)

    assert int.from_bytes(seen["packets"], "little") == len(DATAGRAMS), seen
    assert seen["payload"] == DATAGRAMS[-1][:HEAD], seen  # read back out of the dynptr
    assert seen["scratch"] == DATAGRAMS[-1][:HEAD], seen  # what the dynptr wrote

    text = trace.edges()
    assert_called(trace, "tc_dynptr", HELPERS)
    assert "(unseen caller)" not in text, text
