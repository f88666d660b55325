"""lsm.bpf.c: a BPF LSM program on the file_open hook (SEC("lsm/file_open")) that
denies this process the opening of files named "lsm-deny-*" with -EPERM; the file
name read with BPF_CORE_READ and bpf_probe_read_kernel_str, opens and denials
counted in a hash map value under a bpf_spin_lock, and a bpf_printk line.

BPF LSM programs run only where the kernel started the "bpf" LSM (CONFIG_LSM, or
`lsm=` on the command line): /sys/kernel/security/lsm lists it, else the test skips
saying what that file lists (in a guest, `pytest-lbr vm --append "lsm=...,bpf"`).

The test opens a file it may open and one it may not, while tracing the program:
the PermissionError user space gets, the counters and the printk lines prove the
program ran and decided; the trace has to show every helper by the name the C
source wrote.
"""

from __future__ import annotations

import errno
import os
import struct

import pytest

from tests.conformance.evidence import assert_called, printk_lines, set_global
from tests.conformance.tasks import bpf_lsm_or_skip

PROG = "deny_open"
HELPERS = (
    "bpf_get_current_pid_tgid",
    "BPF_CORE_READ",
    "bpf_probe_read_kernel_str",
    "bpf_map_lookup_elem",
    "bpf_spin_lock",
    "bpf_spin_unlock",
    "bpf_printk",
)


@pytest.mark.allow_skip  # a kernel started without the bpf LSM runs no LSM program
@pytest.mark.program_type("lsm")
def test_lsm_program_denies_our_open(bpf, lbr, built, tmp_path):
    bpf_lsm_or_skip()
    obj = bpf.load(built("lsm"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)
    obj.maps["counters"].update(0, bytes(12))  # struct counts: lock, opens, denied
    allowed, denied = tmp_path / "lsm-allow-me", tmp_path / "lsm-deny-me"
    allowed.write_bytes(b"ok")
    denied.write_bytes(b"secret")

    with prog.attach():  # SEC("lsm/file_open")
        with lbr.trace(prog) as trace:
            assert allowed.read_bytes() == b"ok"
            with pytest.raises(PermissionError) as refused:
                denied.read_bytes()
    assert refused.value.errno == errno.EPERM

    # Both opens counted (and any the tracer made while the program was attached).
    _lock, opens, denials = struct.unpack("<III", obj.maps["counters"][0])
    assert opens >= 2 and denials == 1, (opens, denials)
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert "lsm file_open: lsm-allow-me allowed" in printed, printed
    assert "lsm file_open: lsm-deny-me denied" in printed, printed

    text = trace.edges()
    assert len([h for h in trace.hits if h.pid == pid]) >= 2, text
    assert_called(trace, "deny_open", HELPERS)
    assert "(unseen caller)" not in text, text
