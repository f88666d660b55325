"""A program loaded by bcc is a valid `lbr.trace` target (guest only).

bcc compiles C at run time against the running kernel's headers
(/lib/modules/$(uname -r)/build, from Debian's linux-headers packages that
ci/setup installs), so this runs in the `pytest-lbr vm` guests, whose kernels have them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_lbr.programs.find import resolve_program
from pytest_lbr.targets import parse_target

pytestmark = pytest.mark.kernel

XDP_SRC = r"""
#include <uapi/linux/bpf.h>

BPF_HASH(seen, u32, u64, 16);

int xdp_bcc_probe(struct xdp_md *ctx)
{
    u32 key = 0;
    u64 one = 1;

    seen.update(&key, &one);
    return XDP_PASS;
}
"""


def fdinfo(fd: int) -> dict[str, str]:
    """The kernel's own view of a BPF fd (prog_id, prog_tag, ...)."""
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


@pytest.fixture
def bcc_function():
    bcc = pytest.importorskip("bcc", reason="python3-bpfcc is not installed (ci/setup installs it)")
    build = Path(f"/lib/modules/{os.uname().release}/build")
    if not build.is_dir():
        pytest.skip(
            f"bcc needs kernel headers at {build}: install linux-headers-{os.uname().release}"
        )
    b = bcc.BPF(text=XDP_SRC)
    try:
        yield b.load_func("xdp_bcc_probe", bcc.BPF.XDP)
    finally:
        b.cleanup()


def test_bcc_function_resolves(bcc_function):
    fn = bcc_function
    kernel = fdinfo(fn.fd)
    target = parse_target(fn)
    assert target.kind == "prog" and target.prog_fd == fn.fd
    with resolve_program(target) as ref:
        assert ref.fd != fn.fd  # the ref holds its own reference
        assert ref.id == int(kernel["prog_id"])
        assert ref.tag == kernel["prog_tag"]
        assert ref.name == "xdp_bcc_probe"
        assert ref.type == "xdp"
        assert ref.ksym.startswith(f"bpf_prog_{ref.tag}_")
        ksyms = {line.split()[2] for line in open("/proc/kallsyms") if "[bpf]" in line}
        assert ref.ksym in ksyms
    # The same program is found by id, name and tag, as a user would write them.
    for spec in (f"prog:{ref.id}", "prog:name:xdp_bcc_probe", f"prog:tag:{ref.tag}"):
        with resolve_program(spec) as again:
            assert again.id == ref.id
