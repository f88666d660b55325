"""reuseport.bpf.c: a type the conformance list does not name, SEC("sk_reuseport"),
tried as a user would. `prog.attach()` refuses it in one line that says how (libbpf
has no auto-attach for it); attached by hand with SO_ATTACH_REUSEPORT_EBPF on a
socket of a SO_REUSEPORT group, it runs for each datagram to the group (in
softirq, so the trace is system-wide), and the trace shows its bpf_printk like any
other program's.
"""

from __future__ import annotations

import socket
import struct

import pytest

from pytest_lbr.bpf import AttachError
from tests.conformance.evidence import assert_called, section_map

PROG = "pick_socket"
SO_ATTACH_REUSEPORT_EBPF = 52  # uapi asm-generic/socket.h
DATAGRAMS = 3


def group(n: int) -> list[socket.socket]:
    """`n` UDP sockets in one SO_REUSEPORT group on a free loopback port."""
    first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    first.bind(("127.0.0.1", 0))
    socks = [first]
    for _ in range(n - 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(first.getsockname())
        socks.append(s)
    return socks


@pytest.mark.program_type("sk_reuseport (attached by hand)")
def test_reuseport_program_is_refused_by_attach_and_runs_when_attached_by_hand(bpf, lbr, built):
    obj = bpf.load(built("reuseport"))
    prog = obj.programs[PROG]
    with pytest.raises(AttachError, match=r"no auto-attach for SEC\(\"sk_reuseport\"\).*"
                       r"SO_ATTACH_REUSEPORT_EBPF"):  # fmt: skip
        prog.attach()

    socks = group(2)
    try:
        socks[0].setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, prog.fd)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            # Loopback delivers in softirq, on this thread or ksoftirqd: system-wide.
            with lbr.trace(prog, scope="system") as trace:
                for i in range(DATAGRAMS):
                    tx.sendto(b"hello %d" % i, socks[0].getsockname())
        received = 0
        for s in socks:
            s.setblocking(False)
            while True:
                try:
                    s.recv(64)
                except BlockingIOError:
                    break
                received += 1
    finally:
        for s in socks:
            s.close()

    seen, length = struct.unpack_from("<QI", section_map(obj, ".bss")[0])
    assert received == DATAGRAMS and seen == DATAGRAMS, (received, seen)
    assert length >= len(b"hello 0"), length  # md->len: the datagram as the kernel holds it
    text = trace.edges()
    assert_called(trace, PROG, ("bpf_printk",))
    assert "(unseen caller)" not in text, text
