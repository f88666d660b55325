"""inode_storage.bpf.c: a BPF LSM program on the file_open hook (SEC("lsm/file_open"))
that keeps per-inode state in inode-local storage (bpf_inode_storage_get on a
BPF_MAP_TYPE_INODE_STORAGE map): how often this process opened one file, the
flags of its last open and who opened it, and a bpf_printk line per open. The
inode's number is read with BPF_CORE_READ.

BPF LSM programs run only where the kernel started the "bpf" LSM (as test_lsm.py
says); inode storage lives in that LSM's blob too.

The test opens a file of its own three times (the last one write-only, appending)
while tracing the program, then reads the file's storage back with an fd of the
file as the key (how user space names an inode in this map): the count, the flags,
our pid and the printk lines prove the program ran on each open; the trace has to
show every helper by the name the C source wrote.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import assert_called, printk_lines, set_global
from tests.conformance.tasks import bpf_lsm_or_skip

PROG = "count_inode_open"
#: struct open_stats: opens, last_flags, last_tgid.
STATS = struct.Struct("<III")
HELPERS = ("BPF_CORE_READ", "bpf_get_current_pid_tgid", "bpf_inode_storage_get", "bpf_printk")


@pytest.mark.allow_skip  # a kernel started without the bpf LSM runs no LSM program
@pytest.mark.program_type("lsm (inode storage)")
def test_lsm_program_counts_our_opens_in_inode_storage(bpf, lbr, built, tmp_path):
    bpf_lsm_or_skip()
    obj = bpf.load(built("inode_storage"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    watched = tmp_path / "inode-storage-me"
    watched.write_bytes(b"one\n")
    ino = watched.stat().st_ino
    set_global(obj, "target_ino", ino)
    set_global(obj, "target_tgid", pid)

    with prog.attach():  # SEC("lsm/file_open")
        with lbr.trace(prog) as trace:
            assert watched.read_bytes() == b"one\n"
            assert watched.read_bytes() == b"one\n"
            fd = os.open(watched, os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"two\n")
            os.close(fd)

    # The file's own storage, looked up by an fd of it (this open is not counted:
    # the program is detached).
    fd = os.open(watched, os.O_RDONLY)
    try:
        raw = obj.maps["inode_opens"].lookup(fd)
    finally:
        os.close(fd)
    assert raw is not None, "no inode storage for the file"
    opens, last_flags, last_tgid = STATS.unpack(raw)
    assert (opens, last_tgid) == (3, pid), (opens, last_tgid)
    wanted = os.O_WRONLY | os.O_APPEND
    assert last_flags & (os.O_ACCMODE | os.O_APPEND) == wanted, oct(last_flags)
    printed = [line.message for line in printk_lines() if line.tid == pid]
    for n in (1, 2, 3):
        assert f"inode {ino}: open {n} by {pid}" in printed, printed

    text = trace.edges()
    assert len([h for h in trace.hits if h.pid == pid]) >= 3, text
    assert_called(trace, PROG, HELPERS)
    assert "(unseen caller)" not in text, text
