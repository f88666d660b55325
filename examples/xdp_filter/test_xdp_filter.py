"""The XDP filter, run on real packets with BPF_PROG_TEST_RUN and traced.

The traces prove what the return codes cannot: which helpers the program
really called for each packet (a drop must not pay for the checksum, only
the first packet of a flow inserts into the hash map ...).
"""

import socket
import struct

import pytest
from packets import eth, ipv4, udp, vxlan

XDP_DROP, XDP_PASS = 1, 2
STAT_PASS, STAT_DENIED, STAT_BAD_CSUM, STAT_DECAP = range(4)
SRC = "192.0.2.7"


@pytest.fixture
def filt(bpf, built):
    return bpf.load(built("xdp_filter"))


def stat(obj, key: int) -> int:
    return struct.unpack("<Q", obj.maps["stats"].lookup(key))[0]


def test_vxlan_is_decapsulated(filt, lbr):
    prog = filt.programs["xdp_filter"]
    inner = eth(ipv4(udp(b"hello"), src="10.0.0.1", dst="10.0.0.2"))
    packet = eth(ipv4(udp(vxlan(inner), dport=4789), src=SRC))

    with lbr.trace(prog) as trace:
        res = prog.run(data=packet)

    assert res.retval == XDP_PASS
    assert res.data == inner  # the outer 50 bytes are gone
    assert stat(filt, STAT_DECAP) == 1
    assert trace.called("bpf_csum_diff", by="xdp_filter")
    assert trace.called("bpf_xdp_adjust_head", by="xdp_filter")
    lbr.check_golden(trace)


def test_denied_source_is_dropped_before_the_checksum(filt, lbr):
    prog = filt.programs["xdp_filter"]
    filt.maps["denylist"].update(socket.inet_aton(SRC), b"\x01")

    with lbr.trace(prog) as trace:
        res = prog.run(data=eth(ipv4(udp(b"x"), src=SRC)))

    assert res.retval == XDP_DROP
    assert stat(filt, STAT_DENIED) == 1
    assert trace.called("__htab_map_lookup_elem", by="xdp_filter")
    # The cheap path: a denied packet costs one lookup, no checksum, no accounting.
    assert not trace.called("bpf_csum_diff")
    lbr.check_golden(trace)


def test_corrupted_header_is_dropped(filt, lbr):
    prog = filt.programs["xdp_filter"]
    packet = bytearray(eth(ipv4(udp(b"x"), src=SRC)))
    packet[14 + 8] ^= 0x40  # TTL flipped in flight: the header checksum no longer holds

    with lbr.trace(prog) as trace:
        res = prog.run(data=bytes(packet))

    assert res.retval == XDP_DROP
    assert stat(filt, STAT_BAD_CSUM) == 1
    assert trace.called("bpf_csum_diff", by="xdp_filter")
    assert not trace.called("bpf_xdp_adjust_head")


def test_only_the_first_packet_of_a_flow_inserts(filt, lbr):
    prog = filt.programs["xdp_filter"]
    packet = eth(ipv4(udp(b"payload"), src=SRC))

    with lbr.trace(prog) as first:
        assert prog.run(data=packet).retval == XDP_PASS
    with lbr.trace(prog) as second:
        assert prog.run(data=packet).retval == XDP_PASS

    packets, nbytes = struct.unpack("<QQ", filt.maps["flows"].lookup(socket.inet_aton(SRC)))
    assert (packets, nbytes) == (2, 2 * len(packet))
    assert first.called("htab_map_update_elem", by="account")  # the BPF-to-BPF subprogram
    assert not second.called("htab_map_update_elem")  # found: updated in place
