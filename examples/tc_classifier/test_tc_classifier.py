"""The tc classifier, run on real frames with BPF_PROG_TEST_RUN and traced."""

import struct

import pytest
from packets import eth, ip_checksum, ipv4, tcp, udp

TC_ACT_OK = 0
SKB_SIZE, SKB_PRIORITY = 192, 32  # sizeof(struct __sk_buff), offsetof(.., priority)
EF = 46  # DSCP "expedited forwarding"


@pytest.fixture
def cls(bpf, built):
    obj = bpf.load(built("tc_classifier"))
    # classes[443] = { classid 1:10, DSCP EF }
    obj.maps["classes"].update(struct.pack("<H", 443), struct.pack("<IB3x", 0x10010, EF))
    return obj


def test_https_goes_to_class_1_10_marked_ef(cls, lbr):
    prog = cls.programs["tc_classifier"]
    frame = eth(ipv4(tcp(dport=443), proto=6))

    with lbr.trace(prog) as trace:
        res = prog.run(data=frame, ctx=bytes(SKB_SIZE))

    assert res.retval == TC_ACT_OK
    ip = res.data[14:34]
    assert ip[1] >> 2 == EF
    assert ip_checksum(ip) == 0  # the checksum was fixed up, not just the byte
    assert struct.unpack_from("<I", res.ctx, SKB_PRIORITY)[0] == 0x10010
    assert trace.called("bpf_skb_load_bytes", by="tc_classifier")
    assert trace.called("bpf_l3_csum_replace", by="tc_classifier")
    assert trace.called("bpf_skb_store_bytes", by="tc_classifier")
    lbr.check_golden(trace)


def test_unclassified_traffic_is_left_alone(cls, lbr):
    prog = cls.programs["tc_classifier"]
    frame = eth(ipv4(udp(b"q", dport=53)))

    with lbr.trace(prog) as trace:
        res = prog.run(data=frame, ctx=bytes(SKB_SIZE))

    assert res.retval == TC_ACT_OK
    assert res.data == frame
    assert trace.called("bpf_skb_load_bytes", by="tc_classifier")
    assert not trace.called("bpf_skb_store_bytes")
