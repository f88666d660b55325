"""XDP attached for real: UDP packets sent through a veth pair run the program where
the interface receives them, in softirq, in the driver's NAPI poll (driver mode) or
in the kernel's skb path (generic mode). No BPF_PROG_TEST_RUN anywhere.

The `veth` fixture makes the pair (`veth.host` here, `veth.peer` in a new network
namespace) and removes it after the test; the sender is a socket made in that
namespace, so its packets leave through the peer end and arrive at the host end,
where the program is attached. A socket here receives them: XDP_PASS let them in.

The number of runs is the number of packets, but where and in what order a softirq
runs them may vary, so these tests assert on the hits instead of a golden trace.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
from contextlib import closing

import pytest

PORT = 4242  # veth_xdp.bpf.c counts UDP packets to this port
GOOD = 0
XDP_PASS = 2
PACKETS = 5


@pytest.fixture
def counter(bpf, built):
    return bpf.load(built("veth_xdp"))


def leftovers() -> dict[str, object]:
    """Interfaces, named namespaces and BPF links: what a real attachment could leave."""

    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    return {
        "interfaces": sorted(link["ifname"] for link in json.loads(run("ip", "-j", "link"))),
        "netns": run("ip", "netns", "list").split(),
        "links": sorted(link["id"] for link in json.loads(run("bpftool", "-j", "link") or "[]")),
    }


@pytest.fixture
def nothing_left():
    """Asserts, after the `veth` and `bpf` fixtures' teardown, that nothing remains."""
    before = leftovers()
    yield
    assert leftovers() == before


@pytest.mark.parametrize("mode", ["driver", "generic"])
def test_packets_through_a_veth_run_the_program(nothing_left, counter, veth, lbr, mode):
    prog = counter.programs["veth_xdp"]
    link = prog.attach_xdp(veth.host.name, mode=mode)
    assert link.attached_mode == mode  # veth has native XDP; generic is the skb path

    with closing(veth.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(10)
        with lbr.trace(prog, scope="system") as trace:
            for i in range(PACKETS):
                tx.sendto(b"packet %d" % i, (veth.host.addr, PORT))
            # Once the socket has a packet, the program has run for it.
            received = [rx.recv(64) for _ in range(PACKETS)]

    assert received == [b"packet %d" % i for i in range(PACKETS)]  # XDP_PASS
    assert struct.unpack("<Q", counter.maps["counts"][GOOD])[0] == PACKETS

    # One hit per packet: the program looked its counter up and summed the header.
    runs = [h for h in trace.hits if "bpf_csum_diff" in h.functions()]
    assert len(runs) == PACKETS, str(trace)
    assert trace.called("bpf_csum_diff", by="veth_xdp")
    assert trace.called("__htab_map_lookup_elem", by="veth_xdp")  # the map lookup's call
    assert all(h.retval == XDP_PASS for h in runs), str(trace)
    # The first packet inserted the counter, the others found it.
    calls = [[b.dst.symbol for b in h.branches if b.kind == "call"] for h in runs]
    assert ["htab_map_update_elem" in c for c in calls] == [True] + [False] * (PACKETS - 1)
    # Where it ran: in softirq on some CPU, on top of whatever task was interrupted
    # (the lbr backend does not record the context).
    assert all(h.in_interrupt or trace.backend == "lbr" for h in runs), str(trace)
    assert all(0 <= h.cpu < (os.cpu_count() or 1) for h in runs), str(trace)
    # Not a test run: the capture never entered BPF_PROG_TEST_RUN.
    assert "bpf_prog_test_run" not in trace.capture_text
