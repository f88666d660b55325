"""The founding example: does the program still call bpf_get_smp_processor_id()?

On Linux 6.1 the program calls the helper. Since the Linux commit
("bpf: inline bpf_get_smp_processor_id() helper") (in v6.10) the x86-64
verifier replaces the call with a per-CPU load: the same object, the same
result, and no call in the trace. The test says so with `trace.inlined`; the
golden trace has a default (6.1) and a 6.12 variant, and `pytest-lbr diff`
shows the difference (docs/bisect.md).
"""

import os

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
    if _series() >= (6, 10):  # the x86-64 verifier inlines it since v6.10
        assert trace.inlined("bpf_get_smp_processor_id", by="cpu_stamp")
        assert not trace.called("bpf_get_smp_processor_id")
    else:
        assert trace.called("bpf_get_smp_processor_id", by="cpu_stamp")
        assert not trace.inlined("bpf_get_smp_processor_id")
    lbr.check_golden(trace)


def _series() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int(minor)
