"""tcp_cc.bpf.c: a TCP congestion control written in BPF (struct_ops), Reno through
the kernel's kfuncs `tcp_reno_ssthresh`, `tcp_reno_cong_avoid` and
`tcp_reno_undo_cwnd`, registered with `obj.maps["lbr_reno"].attach_struct_ops()`.

The test opens a loopback connection that chooses it by name
(setsockopt(TCP_CONGESTION, "lbr_reno")) and sends enough to grow the window while
tracing its init and cong_avoid programs. The .bss counters prove they ran; the
trace has to show the helper and the kfunc by the names the C source wrote.
cong_avoid runs on ACKs, which loopback delivers in softirq: the trace is
system-wide.
"""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from tests.conformance.evidence import assert_called, section_map

NAME = b"lbr_reno"
PAYLOAD = 4 << 20  # enough to be window-limited on loopback, so cong_avoid runs


def drain(sock: socket.socket) -> None:
    with sock:
        while sock.recv(1 << 16):
            pass


@pytest.mark.program_type("struct_ops")
def test_bpf_congestion_control_runs_for_our_socket(bpf, lbr, built):
    obj = bpf.load(built("tcp_cc"))
    init, avoid = obj.programs["lbr_init"], obj.programs["lbr_cong_avoid"]

    with obj.maps["lbr_reno"].attach_struct_ops():
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            with lbr.trace(init, avoid, scope="system") as trace:
                client = socket.socket()
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, NAME)
                client.connect(("127.0.0.1", port))
                peer, _ = server.accept()
                reader = threading.Thread(target=drain, args=(peer,))
                reader.start()
                with client:
                    assert (
                        client.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)[
                            : len(NAME)
                        ]
                        == NAME
                    )
                    client.sendall(bytes(PAYLOAD))
                reader.join(timeout=60)
    inits, avoids = struct.unpack("<QQ", section_map(obj, ".bss")[0])

    assert inits >= 1 and avoids >= 1, (inits, avoids)
    text = trace.edges()
    assert_called(trace, "lbr_init", ("bpf_printk",))
    assert_called(trace, "lbr_cong_avoid", ("tcp_reno_cong_avoid",))
    assert "(unseen caller)" not in text, text
    # init returns void: no run of it carries a return value, and the trace says why.
    runs = [h for h in trace.hits if h.target == "prog:name:lbr_init"]
    assert runs and all(h.retval is None for h in runs), text
    assert "prog:name:lbr_init returns void: its runs have no return value" in trace.notes


def test_a_map_that_is_not_struct_ops_is_refused_in_one_line(bpf, built):
    obj = bpf.load(built("tcp_cc"))
    (bss,) = [m for name, m in obj.maps.items() if name.endswith(".bss")]
    with pytest.raises(OSError, match=r"not a struct_ops map"):
        bss.attach_struct_ops()
