"""find_vma.bpf.c: an fentry program on hrtimer_nanosleep (SEC("fentry/
hrtimer_nanosleep")) that, when this process goes to sleep, looks up the mapping
holding an address user space chose (bpf_find_vma on bpf_get_current_task_btf(),
with a callback), and keeps its range, page offset and file name (BPF_CORE_READ
and bpf_probe_read_kernel_str in the callback) in .bss, with a bpf_printk line.

The test points it at the C library's getpid in this process and sleeps while
tracing the program: the mapping it found is the one /proc/self/maps lists for
that address (same range, offset and file), the lookups are counted and printed;
the trace has to show every helper by the name the C source wrote, the
callback's as calls of the callback.
"""

from __future__ import annotations

import ctypes
import os
import struct
import time
from pathlib import Path

import pytest

from tests.conformance.evidence import (
    assert_call_lines,
    assert_called,
    called_table,
    global_vars,
    printk_lines,
    set_global,
)

PROG = "lookup_vma"
NAME_LEN = 32
#: struct vma_info: start, end, pgoff, file[32].
VMA = struct.Struct(f"<QQQ{NAME_LEN}s")
HELPERS = ("bpf_get_current_pid_tgid", "bpf_get_current_task_btf", "bpf_find_vma", "bpf_printk")
#: What the callback (record_vma, run by bpf_find_vma) calls.
CALLBACK_HELPERS = ("BPF_CORE_READ", "bpf_probe_read_kernel_str")


def mapping_of(addr: int) -> tuple[int, int, int, str]:
    """(start, end, offset in pages, file name) of this process's mapping holding `addr`."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, _perms, offset, _dev, _inode, *path = line.split()
        start, end = (int(x, 16) for x in span.split("-"))
        if start <= addr < end:
            name = Path(path[0]).name if path else ""
            return start, end, int(offset, 16) // os.sysconf("SC_PAGE_SIZE"), name
    raise AssertionError(f"{addr:#x} is in no mapping of /proc/self/maps")


@pytest.mark.program_type("fentry (find_vma)")
def test_fentry_finds_the_mapping_of_our_getpid(bpf, lbr, built):
    obj = bpf.load(built("find_vma"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    addr = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value
    assert addr
    set_global(obj, "target_tgid", pid)
    set_global(obj, "target_addr", addr)

    with prog.attach():  # SEC("fentry/hrtimer_nanosleep")
        with lbr.trace(prog) as trace:
            time.sleep(0.001)

    start, end, pgoff, name = mapping_of(addr)
    found = global_vars(obj)
    got = VMA.unpack(found["found"])
    assert got[:3] == (start, end, pgoff), ([hex(x) for x in got[:3]], hex(start), hex(end))
    assert got[3].rstrip(b"\0").decode() == name[: NAME_LEN - 1], (got[3], name)
    assert name.startswith("libc"), name
    assert int.from_bytes(found["lookups"], "little") >= 1
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"find_vma {addr:x}: {name}" in printed, printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == pid], text
    assert_called(trace, PROG, HELPERS)
    # Its two bpf_printk calls (lines 55 and 60) are one call instruction (line 0).
    source = Path(__file__).with_name("find_vma.bpf.c")
    assert_call_lines(trace, PROG, "bpf_printk", source, merged=True)
    if not trace.no_branches:
        # The callback's calls are its own: bpf_find_vma runs record_vma, a function
        # of the program (`by` names the BPF function a call is made from).
        print(called_table(trace, "record_vma", CALLBACK_HELPERS))
        assert trace.called("BPF_CORE_READ", by="record_vma"), text
        assert trace.called("bpf_probe_read_kernel_str", by="record_vma"), text
    assert "(unseen caller)" not in text, text
