"""The README's first example, run as written, and the helpers it calls by their C names.

The program calls bpf_map_lookup_elem() on a hash map and bpf_get_prandom_u32().
The kernel runs __htab_map_lookup_elem and bpf_user_rnd_u32 for them; a test
asserts the names the C source wrote, and the trace shows both.
"""

from packets import eth, ipv4, udp

packet = eth(ipv4(udp(b"counted"), src="192.0.2.1"))


# From README.md, verbatim (tests/test_readme.py checks that it stays so).
# fmt: off
def test_counter(bpf, lbr):
    obj = bpf.load("build/xdp_counter.bpf.o")          # closed at teardown
    prog = obj.programs["xdp_count"]
    with lbr.trace(prog) as trace:
        res = prog.run(data=packet)                     # BPF_PROG_TEST_RUN
    assert res.retval == 2
    assert trace.called("bpf_map_lookup_elem", by="xdp_count")
    lbr.check_golden(trace)                             # compare with the golden trace
# fmt: on


def test_helpers_by_their_c_names(bpf, built, lbr):
    prog = bpf.load(built("xdp_counter")).programs["xdp_count"]
    with lbr.trace(prog) as trace:
        assert prog.run(data=packet).retval == 2

    assert trace.called("bpf_get_prandom_u32", by="xdp_count")
    assert trace.called("bpf_map_update_elem", by="xdp_count")  # a new source address
    assert trace.has_path("bpf_map_lookup_elem", "bpf_map_update_elem", "bpf_get_prandom_u32")
    # The tree names the helper as the C wrote it and the kernel's function that ran;
    # so do the branch records.
    assert "  bpf_get_prandom_u32 \u2192 bpf_user_rnd_u32 " in str(trace), str(trace)
    assert "bpf_user_rnd_u32+0x0 [bpf_get_prandom_u32]" in trace.edges()
    # The array lookup of the sampler is inlined by the verifier (array_map_gen_lookup).
    assert trace.inlined("bpf_map_lookup_elem", by="xdp_count")
    calls = [(c.helper, c.fate, c.function) for c in trace.programs()["xdp_count"].calls]
    assert calls == [
        ("bpf_map_lookup_elem", "rewritten", "__htab_map_lookup_elem"),
        ("bpf_map_update_elem", "rewritten", "htab_map_update_elem"),
        ("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32"),
        ("bpf_map_lookup_elem", "inlined", None),
    ]
