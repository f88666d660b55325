"""sk_lookup.bpf.c: a socket lookup program (SEC("sk_lookup")) attached to the `veth`
fixture's network namespace (`prog.attach_netns(veth.netns)`): TCP connections there
to a port nobody listens on are given (bpf_sk_assign) the listening socket user space
put into a sockmap (looked up with bpf_map_lookup_elem, released with bpf_sk_release).

The test listens on one port in that namespace and connects to another: the
connection is accepted by our listener, which proves the steering; the counter and
the client's port the program recorded prove it was this program. The lookup runs
where loopback delivers the SYN, in softirq, so the trace is system-wide.
"""

from __future__ import annotations

import socket

import pytest

from tests.conformance.evidence import assert_called, global_vars, set_global

PROG = "steer"
STEERED_PORT = 7007  # nobody listens here
HELPERS = ("bpf_map_lookup_elem", "bpf_sk_assign", "bpf_sk_release", "bpf_printk")


@pytest.mark.program_type("sk_lookup")
def test_sk_lookup_steers_a_connection_to_our_listener(bpf, lbr, built, veth):
    obj = bpf.load(built("sk_lookup"))
    prog = obj.programs[PROG]
    set_global(obj, "port", STEERED_PORT)

    def listen() -> socket.socket:
        s = socket.create_server(("127.0.0.1", 0))
        s.settimeout(10)
        return s

    server = veth.call(listen)  # in the namespace: it stays there
    client = veth.socket(type=socket.SOCK_STREAM)
    with server, client:
        obj.maps["listener"].update(0, server.fileno())
        with prog.attach_netns(veth.netns):
            with lbr.trace(prog, scope="system") as trace:
                client.settimeout(10)
                client.connect(("127.0.0.1", STEERED_PORT))
                peer, (_, client_port) = server.accept()
                with peer:
                    client.sendall(b"steered")
                    assert peer.recv(64) == b"steered"
                    assert peer.getsockname()[1] == STEERED_PORT  # what the client asked for

    seen = {name: int.from_bytes(raw, "little") for name, raw in global_vars(obj).items()}
    assert seen["steered"] == 1, seen
    assert seen["remote_port"] == client_port, (seen, client_port)

    text = trace.edges()
    assert_called(trace, "steer", HELPERS)
    assert "(unseen caller)" not in text, text
