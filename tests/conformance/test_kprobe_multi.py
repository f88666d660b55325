"""kprobe_multi.bpf.c: one program on several kernel functions
(SEC("kprobe.multi/do_*dir*"): libbpf expands the glob and attaches one fprobe
link; libbpf 1.1 has the section), telling them apart with bpf_get_func_ip and
counting this process's calls of each in a hash map keyed by that address.

The test makes and removes a directory while tracing the program: the map then
counts one call of do_mkdirat and one of do_rmdir (their addresses from
/proc/kallsyms), and the printk lines name them; the trace has to show every helper
by the name the C source wrote. A kernel built without fprobe (CONFIG_FPROBE, which
kprobe.multi links need: Debian's 6.1) refuses the attach with EOPNOTSUPP, and the
test skips with that error.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from pytest_lbr.bpf.libbpf import BpfError
from tests.conformance.evidence import (
    assert_called,
    lost_program_calls,
    printk_lines,
    set_global,
)

PROG = "count_dir_ops"
HELPERS = (
    "bpf_get_current_pid_tgid",
    "bpf_get_func_ip",
    "bpf_map_lookup_elem",
    "bpf_map_update_elem",
    "bpf_printk",
)


def kallsyms(*names: str) -> dict[str, int]:
    """The addresses of kernel functions `names` (root reads them unhidden)."""
    found = {}
    for line in Path("/proc/kallsyms").read_text().splitlines():
        addr, kind, name = line.split()[:3]
        if name in names and kind in "tT":
            found[name] = int(addr, 16)
    assert set(found) == set(names), found
    return found


@pytest.mark.allow_skip  # Debian's 6.1 has no fprobe (# CONFIG_FPROBE is not set)
@pytest.mark.program_type("kprobe.multi")
def test_kprobe_multi_counts_our_dir_ops(bpf, lbr, built, tmp_path):
    obj = bpf.load(built("kprobe_multi"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)
    where = kallsyms("do_mkdirat", "do_rmdir")
    made = tmp_path / "kprobe-multi"

    try:
        link = prog.attach()  # SEC("kprobe.multi/do_*dir*")
    except BpfError as exc:
        if exc.errno == errno.EOPNOTSUPP:  # a kernel without CONFIG_FPROBE
            pytest.skip(f"{os.uname().release}: {exc}")
        raise
    with link:
        with lbr.trace(prog) as trace:
            os.mkdir(made)
            os.rmdir(made)

    counted = {
        struct.unpack("<Q", k)[0]: struct.unpack("<Q", v)[0] for k, v in obj.maps["calls"].items()
    }
    assert counted == {where["do_mkdirat"]: 1, where["do_rmdir"]: 1}, (counted, where)
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert "kprobe.multi: do_mkdirat" in printed, printed
    assert "kprobe.multi: do_rmdir" in printed, printed

    text = trace.edges()
    assert len([h for h in trace.hits if h.pid == pid]) == 2, text
    assert_called(
        trace,
        "count_dir_ops",
        (
            "bpf_get_current_pid_tgid",
            "bpf_get_func_ip",
            "bpf_map_lookup_elem",
            "bpf_map_update_elem",
            "bpf_printk",
        ),
    )
    assert not lost_program_calls(trace), text  # symbol_string: 3 notrace calls down
