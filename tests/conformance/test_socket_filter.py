"""socket_filter.bpf.c: a socket filter (SEC("socket")) attached by the test to a
socket it owns with setsockopt(SOL_SOCKET, SO_ATTACH_BPF, prog.fd). Datagrams that
start with "LBR!" are cut to their first 8 bytes (a socket filter returns how many
bytes to keep), others pass whole; it reads the head with bpf_skb_load_bytes and
records its socket's cookie (bpf_get_socket_cookie) and owner (bpf_get_socket_uid).

The test sends over an AF_UNIX datagram socket pair: af_unix runs the receiver's
filter in the sender's sendmsg, in this thread. The datagram received cut to 8
bytes (and the other one whole), the cookie equal to the receiving socket's
SO_COOKIE, the uid and the printk line prove it ran; the trace has to show every
helper by the name the C source wrote.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest

from tests.conformance.evidence import assert_called, global_vars, printk_lines

PROG = "trim_magic"
SO_ATTACH_BPF = 50
SO_COOKIE = 57
MAGIC = b"LBR!hello, filter"
HELPERS = ("bpf_skb_load_bytes", "bpf_get_socket_cookie", "bpf_get_socket_uid", "bpf_printk")


@pytest.mark.program_type("socket_filter")
def test_socket_filter_cuts_our_datagram(bpf, lbr, built):
    obj = bpf.load(built("socket_filter"))
    prog = obj.programs[PROG]
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with sender, receiver:
        receiver.setsockopt(socket.SOL_SOCKET, SO_ATTACH_BPF, prog.fd)
        with lbr.trace(prog) as trace:
            sender.send(MAGIC)
            sender.send(b"plain datagram")
        got = [receiver.recv(100), receiver.recv(100)]
        (cookie,) = struct.unpack("<Q", receiver.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8))

    assert got == [MAGIC[:8], b"plain datagram"]
    seen = {name: int.from_bytes(raw, "little") for name, raw in global_vars(obj).items()}
    assert seen == {"trimmed": 1, "socket_cookie": cookie, "socket_uid": os.geteuid()}, seen
    printed = [line.message for line in printk_lines() if line.tid == os.getpid()]
    assert f"socket filter: {len(MAGIC)} bytes cut to 8" in printed, printed

    text = trace.edges()
    assert len([h for h in trace.hits if h.pid == os.getpid()]) == 2, text  # one per datagram
    assert_called(
        trace,
        "trim_magic",
        (
            "bpf_skb_load_bytes",
            "bpf_get_socket_cookie",
            "bpf_get_socket_uid",
            "bpf_printk",
        ),
    )
    assert "(unseen caller)" not in text, text
