"""tcx.bpf.c: a tcx ingress program (SEC("tcx/ingress")) attached for real to the host
end of a veth pair as a tcx BPF link (`prog.attach_tcx(interface)`, Linux >= 6.6):
no qdisc, no netlink filter. libbpf 1.1 knows neither the section nor
bpf_program__attach_tcx; the harness loads it as sched_cls and makes the link with
bpf_link_create(BPF_TCX_INGRESS), and `prog.attach()` says which call attaches it.

The test sends datagrams from the `veth` fixture's namespace to the host end; ingress
runs in softirq, so the trace is system-wide. The counter, the last datagram's head
the program kept and the datagrams arriving prove it ran; the trace has to show every
helper by the name the C source wrote. Linux 6.1 refuses a tcx link, and the test
skips with the kernel's error.
"""

from __future__ import annotations

import errno
import os
import socket
from contextlib import closing

import pytest

from pytest_lbr.bpf import AttachError
from tests.conformance.evidence import assert_called, global_vars, set_global
from tests.conformance.net import kernel_before

PROG = "tcx_count"
PORT = 4246
DATAGRAMS = [b"tcx datagram #%d" % i for i in range(3)]
HELPERS = ("bpf_skb_load_bytes", "bpf_printk")


@pytest.mark.allow_skip  # tcx links came with Linux 6.6: Debian's 6.1 refuses them
@pytest.mark.program_type("tcx")
def test_tcx_ingress_link_sees_our_datagrams(bpf, lbr, built, veth):
    obj = bpf.load(built("tcx"))
    prog = obj.programs[PROG]
    assert (prog.type, prog.section) == ("sched_cls", "tcx/ingress")
    with pytest.raises(AttachError, match=r"use prog\.attach_tcx\(interface\)"):
        prog.attach()
    set_global(obj, "port", PORT)

    try:
        link = prog.attach_tcx(veth.host.name, direction="ingress")
    except AttachError as exc:
        if exc.errno == errno.EINVAL and kernel_before(6, 6):
            # Not the veth's name: it changes from run to run (docs/guide.md's table).
            pytest.skip(f"{os.uname().release}: {str(exc).replace(veth.host.name, 'a veth')}")
        raise
    with link, closing(veth.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(10)
        with lbr.trace(prog, scope="system") as trace:
            for datagram in DATAGRAMS:
                tx.sendto(datagram, (veth.host.addr, PORT))
                assert rx.recv(64) == datagram  # TCX_PASS
    seen = global_vars(obj)

    assert int.from_bytes(seen["packets"], "little") == len(DATAGRAMS), seen
    assert seen["head"] == DATAGRAMS[-1][:8], seen

    text = trace.edges()
    assert_called(trace, "tcx_count", HELPERS)
    assert "(unseen caller)" not in text, text
