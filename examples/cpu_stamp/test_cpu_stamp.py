"""The founding example: does the program still call bpf_get_smp_processor_id()?

On Linux 6.1 the program calls the helper. Since the Linux commit
("bpf: inline bpf_get_smp_processor_id() helper") (in v6.10) the x86-64
verifier replaces the call with a per-CPU load: the same object, the same
result, and no call in the trace. The golden trace has a default (6.1) and a
6.12 variant, and `pytest-lbr diff` shows the difference (docs/bisect.md).
"""

import pytest
from packets import eth, ipv4, udp

XDP_PASS = 2


# The tracer's own helpers are left out of golden traces by default; this
# example is about exactly one of them, so keep it.
@pytest.mark.lbr(keep=["bpf_get_smp_processor_id"])
def test_cpu_stamp(bpf, built, lbr):
    obj = bpf.load(built("cpu_stamp"))
    prog = obj.programs["cpu_stamp"]

    with lbr.trace(prog) as trace:
        res = prog.run(data=eth(ipv4(udp(b"x"))))

    assert res.retval == XDP_PASS
    counts = [int.from_bytes(v, "little") for _, v in obj.maps["per_cpu"].items()]
    assert sum(counts) == 1
    lbr.check_golden(trace)
