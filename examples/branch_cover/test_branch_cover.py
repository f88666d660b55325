"""Coverage's example: each test takes one arm of the program's branch.

Run alone under `--lbr-cov`, each shows the other arm's lines as not observed;
run together, both arms are covered (docs/guide.md, "Coverage").
"""

from packets import eth, ipv4, udp

ETH_P_IPV6 = 0x86DD
XDP_DROP, XDP_PASS = 1, 2


def test_ipv4_takes_the_first_arm(bpf, built, lbr):
    prog = bpf.load(built("branch_cover")).programs["branch_cover"]
    with lbr.trace(prog) as trace:
        assert prog.run(data=eth(ipv4(udp(b"v4")))).retval == XDP_PASS
    assert trace.called("bpf_map_update_elem", by="branch_cover")
    assert not trace.called("bpf_map_delete_elem")


def test_other_packets_take_the_second_arm(bpf, built, lbr):
    prog = bpf.load(built("branch_cover")).programs["branch_cover"]
    with lbr.trace(prog) as trace:
        assert prog.run(data=eth(bytes(40), proto=ETH_P_IPV6)).retval == XDP_DROP
    assert trace.called("bpf_get_prandom_u32", by="branch_cover")
    assert not trace.called("bpf_map_update_elem")
