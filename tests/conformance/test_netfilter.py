"""netfilter.bpf.c: a netfilter program (SEC("netfilter"), Linux >= 6.4) on the IPv4
LOCAL_IN hook, attached as a netfilter BPF link (`prog.attach_netfilter("local_in")`).
libbpf 1.1 knows neither the section nor bpf_program__attach_netfilter: the harness
loads it as BPF_PROG_TYPE_NETFILTER and makes the link with bpf(2) BPF_LINK_CREATE
itself, and `prog.attach()` says which call attaches it.

The test sends datagrams to a socket of its own over loopback; LOCAL_IN runs where
loopback delivers them, in softirq, so the trace is system-wide. The counter, the hook
and the source port the program recorded prove it ran; the trace has to show every
helper by the name the C source wrote (BPF_CORE_READ as the macro). Linux 6.1 has no
netfilter programs: it refuses the load, and the test skips with the kernel's error.
"""

from __future__ import annotations

import os
import socket

import pytest

from pytest_lbr.bpf import AttachError, BpfLoadError
from tests.conformance.evidence import assert_called, global_vars, set_global
from tests.conformance.net import kernel_before

PROG = "nf_count"
PORT = 4247
DATAGRAMS = 3
NF_INET_LOCAL_IN = 1
HELPERS = ("BPF_CORE_READ", "bpf_probe_read_kernel", "bpf_printk")


@pytest.mark.allow_skip  # netfilter programs came with Linux 6.4: Debian's 6.1 refuses them
@pytest.mark.program_type("netfilter")
def test_netfilter_local_in_sees_our_datagrams(bpf, lbr, built):
    try:
        obj = bpf.load(built("netfilter"))
    except BpfLoadError as exc:
        if kernel_before(6, 4):
            failed = [line for line in exc.log.splitlines() if "load failed" in line]
            pytest.skip(f"{os.uname().release}: {(failed or [str(exc)])[0].strip()}")
        raise
    prog = obj.programs[PROG]
    assert (prog.type, prog.section) == ("netfilter", "netfilter")
    with pytest.raises(AttachError, match=r"use prog\.attach_netfilter\(hook\)"):
        prog.attach()
    set_global(obj, "port", PORT)

    with (
        prog.attach_netfilter("local_in", pf="ipv4", priority=-100),
        socket.socket(type=socket.SOCK_DGRAM) as rx,
        socket.socket(type=socket.SOCK_DGRAM) as tx,
    ):
        rx.bind(("127.0.0.1", PORT))
        rx.settimeout(10)
        tx.bind(("127.0.0.1", 0))
        with lbr.trace(prog, scope="system") as trace:
            for i in range(DATAGRAMS):
                tx.sendto(b"nf %d" % i, ("127.0.0.1", PORT))
                assert rx.recv(64) == b"nf %d" % i  # NF_ACCEPT
        sport = tx.getsockname()[1]

    seen = {name: int.from_bytes(raw, "little") for name, raw in global_vars(obj).items()}
    assert seen["packets"] == DATAGRAMS, seen
    assert (seen["hook"], seen["sport"]) == (NF_INET_LOCAL_IN, sport), seen

    text = trace.edges()
    assert_called(trace, "nf_count", HELPERS)
    assert "(unseen caller)" not in text, text
