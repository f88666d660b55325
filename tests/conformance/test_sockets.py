"""sockets.bpf.c: the socket hooks of one TCP connection over loopback, written as a
sockmap-accelerated proxy writes them: cgroup/connect4 and cgroup_skb/egress on the
root cgroup (`prog.attach_cgroup()`), sockops putting both ends of the connection
into a sockmap, and sk_msg on that sockmap (`prog.attach_sockmap(map)`).

The test connects to a listener of its own and sends a few messages while tracing
all four programs. Each program's .bss counter proves it ran; the passive side's
sockops and much of egress run in softirq (loopback delivers there), so the trace
is system-wide. Every helper the C source calls is asserted by its written name.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest

from tests.conformance.evidence import assert_called, section_map

HELPERS = {
    "on_connect4": ("bpf_get_current_pid_tgid", "bpf_printk"),
    "on_egress": ("bpf_skb_load_bytes",),
    "on_sockops": ("bpf_sock_map_update", "bpf_printk"),
    "on_msg": ("bpf_printk",),
}
MESSAGES = 3


def counters(obj) -> dict[str, int]:
    """The counters of the .bss variable `g`, after its `port` (a u32, padded to 8)."""
    raw = section_map(obj, ".bss")[0]
    connects, packets, established, messages = struct.unpack_from("<4Q", raw, 8)
    return {
        "on_connect4": connects,
        "on_egress": packets,
        "on_sockops": established,
        "on_msg": messages,
    }


@pytest.mark.program_type("cgroup/connect4, cgroup_skb, sockops, sk_msg")
def test_socket_hooks_see_our_connection(bpf, lbr, built):
    obj = bpf.load(built("sockets"))
    progs = {name: obj.programs[name] for name in HELPERS}
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        section_map(obj, ".bss").update(0, struct.pack("<I", port) + bytes(36))
        with (
            progs["on_connect4"].attach_cgroup(),
            progs["on_egress"].attach_cgroup(),
            progs["on_sockops"].attach_cgroup(),
            progs["on_msg"].attach_sockmap(obj.maps["socks"]),
        ):
            with lbr.trace(*progs.values(), scope="system") as trace:
                with socket.create_connection(("127.0.0.1", port)) as client:
                    peer, _ = server.accept()
                    with peer:
                        for i in range(MESSAGES):
                            client.sendall(b"ping %d" % i)
                            assert peer.recv(64).startswith(b"ping")
            seen = counters(obj)

    assert seen["on_connect4"] == 1, seen
    assert seen["on_sockops"] == 2, seen  # both ends, established
    assert seen["on_msg"] >= MESSAGES, seen
    assert seen["on_egress"] >= MESSAGES, seen
    text = trace.edges()
    for name, helpers in HELPERS.items():
        assert_called(trace, name, helpers)
    assert "(unseen caller)" not in text, text


def test_attaching_to_the_wrong_place_says_what_to_do(bpf, built):
    obj = bpf.load(built("sockets"))
    with pytest.raises(OSError, match=r"on_msg .*cgroup programs come from"):
        obj.programs["on_msg"].attach_cgroup()
    with pytest.raises(OSError, match=r"on_egress .*sockmap programs come from"):
        obj.programs["on_egress"].attach_sockmap(obj.maps["socks"])
    with pytest.raises(OSError, match=r"cgroup v2 directory"):
        obj.programs["on_egress"].attach_cgroup(f"/nonexistent-{os.getpid()}")
