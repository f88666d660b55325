"""sk_skb.bpf.c: a stream verdict program (SEC("sk_skb/stream_verdict")) on a sockmap
(`prog.attach_sockmap(map)`), and the sockops program (`prog.attach_cgroup()`) that
puts the listener's side of one TCP connection over loopback into that sockmap and
stamps it with socket-local storage (bpf_sk_storage_get: an sk_skb program may not
call it, a sockops program may).

The test connects to a listener of its own and sends a few messages; each arrives
through the verdict program (SK_PASS). The socket's own storage (read from user
space with the socket's fd as the key), the counters and the last message's head
prove both programs ran. Loopback delivers in softirq, where both run, so the trace
is system-wide. Every helper the C source calls is asserted by its written name.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.conformance.evidence import assert_called, global_vars, set_global

HELPERS = {
    "stamp_sock": ("bpf_sk_storage_get", "bpf_ktime_get_ns", "bpf_sock_map_update"),
    "verdict": ("bpf_skb_load_bytes", "bpf_printk"),
}
MESSAGES = [b"sk_skb message #%d" % i for i in range(3)]
#: struct stamp: established_ns, local_port, skbs.
STAMP = struct.Struct("<QII")


@pytest.mark.program_type("sk_skb (stream_verdict), sockops (sk_storage)")
def test_stream_verdict_sees_what_our_socket_receives(bpf, lbr, built):
    obj = bpf.load(built("sk_skb"))
    progs = {name: obj.programs[name] for name in HELPERS}
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        set_global(obj, "port", port)
        # The verdict program first: a socket put into the map later gets it.
        with (
            progs["verdict"].attach_sockmap(obj.maps["socks"]),
            progs["stamp_sock"].attach_cgroup(),
        ):
            with lbr.trace(*progs.values(), scope="system") as trace:
                with socket.create_connection(("127.0.0.1", port)) as client:
                    peer, _ = server.accept()
                    with peer:
                        peer.settimeout(10)
                        for message in MESSAGES:
                            client.sendall(message)
                            assert peer.recv(64) == message  # SK_PASS
                        raw = obj.maps["stamps"].lookup(peer.fileno())
            seen = global_vars(obj)

    counts = {k: int.from_bytes(seen[k], "little") for k in ("established", "verdicts", "bytes")}
    assert counts["established"] == 1, counts
    assert counts["verdicts"] >= len(MESSAGES), counts  # one skb per message, at least
    assert counts["bytes"] == sum(map(len, MESSAGES)), counts
    assert seen["head"] == MESSAGES[-1][:8], seen
    assert raw is not None, "no socket storage on the accepted socket"
    established_ns, local_port, _ = STAMP.unpack(raw)
    assert local_port == port and established_ns >= before, (local_port, established_ns)

    text = trace.edges()
    for name, helpers in HELPERS.items():
        assert_called(trace, name, helpers)
    assert "(unseen caller)" not in text, text
