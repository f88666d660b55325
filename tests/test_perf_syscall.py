"""perf_event_open is called by each architecture's own syscall number: the table
in pytest_lbr.kernel.perf against the uapi headers installed on this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_lbr.kernel.perf import PERF_EVENT_OPEN_NR

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    # arm64 and riscv64 use the generic table.
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    "riscv64": Path("/usr/include/asm-generic/unistd.h"),
}


@pytest.mark.parametrize("machine", sorted(PERF_EVENT_OPEN_NR))
def test_syscall_number_matches_the_uapi_header(machine: str) -> None:
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"{header} not installed (linux-libc-dev)")
    m = re.search(r"#define __NR_perf_event_open (\d+)", header.read_text())
    assert m is not None, header
    assert PERF_EVENT_OPEN_NR[machine] == int(m.group(1))
