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
import sys
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


#: A process of its own in the peer namespace: it starts (exec, the dynamic loader,
#: Python's start-up: hundreds of thousands of kernel calls) and sends 3 packets.
SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(3):
    s.sendto(b"packet %d" % i, (sys.argv[1], int(sys.argv[2])))
"""


def test_packets_from_a_process_started_in_the_namespace(nothing_left, counter, veth, lbr):
    """What a CI job for an attached program does: the traffic comes from a process
    started during the trace. A system-wide trace of the program records the calls
    the program can make, not the whole machine starting a process, so nothing is
    lost and each run has its helper calls, named as the C source names them."""
    prog = counter.programs["veth_xdp"]
    prog.attach_xdp(veth.host.name, mode="generic")

    with closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(60)
        with lbr.trace(prog, scope="system") as trace:
            veth.run([sys.executable, "-c", SENDER, veth.host.addr, str(PORT)], check=True)
            received = [rx.recv(64) for _ in range(3)]

    assert received == [b"packet %d" % i for i in range(3)]
    assert trace.lost == 0, trace.notes
    runs = [h for h in trace.hits if "bpf_csum_diff" in h.functions()]
    assert len(runs) >= 3, str(trace)
    for run in runs:
        helpers = {b.dst.helper or b.dst.symbol for b in run.branches if b.kind == "call"}
        assert {"bpf_csum_diff", "bpf_map_lookup_elem"} <= helpers, str(run)
    assert trace.called("bpf_map_lookup_elem", by="veth_xdp")
