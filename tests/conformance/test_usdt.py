"""usdt.bpf.c: a USDT program (SEC("usdt")) on the lbr_demo:tick probe of a small
program the test builds with gcc (usdt_target.c: `DTRACE_PROBE2(lbr_demo, tick, i,
value)` from <sys/sdt.h>, Debian's systemtap-sdt-dev). BPF_USDT (libbpf's
usdt.bpf.h) names the probe's two arguments; each tick goes to a ring buffer with
the process that fired it, is counted in .bss and printed. libbpf cannot
auto-attach a bare SEC("usdt"): the test attaches it with bpf_program__attach_usdt
(`prog.attach_usdt(binary, provider, name)`), on every process running the binary.

The test runs the program it built (a child: traced with `scope="children"`) while
tracing the USDT program: the ring buffer's records (the child's pid, each tick's
number and value as the child computed them), the counter and the printk lines
prove it ran once per tick; the trace has to show every helper by the name the C
source wrote.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.conformance.evidence import (
    assert_called,
    called_table,
    global_vars,
    printk_lines,
    ring_buffer_records,
)

PROG = "on_tick"
TARGET_SRC = Path(__file__).resolve().parent / "usdt_target.c"
#: struct tick_event: pid, seq, value.
EVENT = struct.Struct("<Iiq")
HELPERS = ("bpf_ringbuf_reserve", "bpf_get_current_pid_tgid", "bpf_ringbuf_submit", "bpf_printk")
BASE, TICKS = 40, 3
#: What BPF_USDT's bpf_usdt_arg (usdt.bpf.h) calls to fetch an argument (the spec
#: lookup in an array map is inlined; the cookie helper calls nothing traced).
USDT_H = ("bpf_get_attach_cookie", "bpf_map_lookup_elem", "bpf_probe_read_kernel")


@pytest.fixture
def usdt_target(tmp_path: Path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (ci/setup installs it)")
    out = tmp_path / "usdt_target"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(TARGET_SRC)], check=True)
    return out


@pytest.mark.program_type("usdt")
def test_usdt_program_sees_every_tick_of_our_program(bpf, lbr, built, usdt_target):
    obj = bpf.load(built("usdt"))
    prog = obj.programs[PROG]
    values = [BASE + i * i for i in range(TICKS)]

    with prog.attach_usdt(usdt_target, "lbr_demo", "tick"):  # every process running it
        with lbr.trace(prog, scope="children") as trace:
            proc = subprocess.Popen(
                [str(usdt_target), str(BASE), str(TICKS)], stdout=subprocess.PIPE
            )
            out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == f"{sum(values)}\n".encode(), out
    child = proc.pid

    # One record per tick, from the child, with the arguments it passed.
    events = [EVENT.unpack(r) for r in ring_buffer_records(obj.maps["ticks"])]
    assert [(seq, value) for _pid, seq, value in events] == list(enumerate(values)), events
    assert {pid for pid, _seq, _value in events} == {child}, events
    (seen,) = struct.unpack("<Q", global_vars(obj)["seen"])
    assert seen == TICKS
    printed = [line.message for line in printk_lines() if line.tid == child]
    for seq, value in enumerate(values):
        assert f"usdt lbr_demo:tick: seq={seq} value={value}" in printed, printed

    text = trace.edges()
    assert len([h for h in trace.hits if h.pid == child]) == TICKS, text
    assert_called(trace, PROG, HELPERS)
    if not trace.no_branches:
        # BPF_USDT fetches each argument with usdt.bpf.h's bpf_usdt_arg, a function
        # of the program: both are in registers here, read from pt_regs.
        print(called_table(trace, "bpf_usdt_arg", USDT_H))
        assert trace.called("bpf_probe_read_kernel", by="bpf_usdt_arg"), text
    assert "(unseen caller)" not in text, text
