"""flow_dissector.bpf.c: a BPF flow dissector (SEC("flow_dissector")) attached to the
`veth` fixture's network namespace (`prog.attach_netns(veth.netns)`), reading the IP
and UDP/TCP headers with bpf_skb_load_bytes and filling the flow keys the kernel's
own dissector would.

Real work makes the kernel dissect: the test makes a TAP device in that namespace
and writes Ethernet frames into it, as a VM's network back end does; the tun driver
dissects each frame it receives to find its transport header
(skb_probe_transport_header), in the writing thread, with the namespace's dissector.
(A socket's own datagrams carry their socket's flow hash, so the qdiscs and RPS that
would hash them never dissect them.) The counter and the ports and transport offset
the program found prove it ran for our frames; the trace is system-wide to be sure
of the context.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

import pytest

from pytest_lbr.bpf.netns import ip
from tests.conformance.evidence import assert_called, global_vars, set_global
from tests.conformance.net import tun_device

PROG = "dissect"
PORT = 4245
SPORT = 5555
FRAMES = 3
IP_HLEN = 20
TAP = "lbrtap0"
TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def tap(name: str) -> int:
    """A TAP device `name` in the calling thread's namespace: the fd its frames are
    written to (it goes when the fd closes)."""
    fd = os.open(tun_device(), os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def frame(src: str, dst: str, payload: bytes) -> bytes:
    """An Ethernet frame (broadcast) carrying a UDP datagram SPORT -> PORT."""
    udp = struct.pack("!4H", SPORT, PORT, 8 + len(payload), 0) + payload
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, IP_HLEN + len(udp), 1, 0, 64, 17, 0,
                       socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
    return b"\xff" * 6 + bytes.fromhex("026c62000001") + b"\x08\x00" + head + udp


@pytest.mark.program_type("flow_dissector")
def test_flow_dissector_dissects_the_frames_a_tap_receives(bpf, lbr, built, veth):
    obj = bpf.load(built("flow_dissector"))
    prog = obj.programs[PROG]
    set_global(obj, "port", PORT)
    fd = veth.call(lambda: tap(TAP))
    try:
        ip("link", "set", TAP, "up", netns=veth.netns)
        with prog.attach_netns(veth.netns):
            with lbr.trace(prog, scope="system") as trace:
                for i in range(FRAMES):
                    os.write(fd, frame("198.18.0.9", "198.18.0.10", b"flow %d" % i))
    finally:
        os.close(fd)

    seen = {name: int.from_bytes(raw, "little") for name, raw in global_vars(obj).items()}
    assert seen["dissected"] == FRAMES, seen
    assert (seen["last_sport"], seen["last_dport"]) == (SPORT, PORT), seen
    assert seen["last_thoff"] == IP_HLEN, seen  # nhoff 0: tun pulled the Ethernet header

    text = trace.edges()
    assert_called(trace, "dissect", ("bpf_skb_load_bytes",))
    assert "(unseen caller)" not in text, text
