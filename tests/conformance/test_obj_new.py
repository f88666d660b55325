"""obj_new.bpf.c: allocated objects (the kfuncs bpf_obj_new_impl and
bpf_obj_drop_impl, behind bpf_obj_new / bpf_obj_drop macros written in the C) in an
fentry program on vfs_fsync_range (SEC("fentry/vfs_fsync_range")): per fsync of
this process a record of the program's own type is allocated, filled (the inode's
number with BPF_CORE_READ), copied to .bss, printed and dropped.

The kfuncs came with Linux 6.2: where the kernel's BTF lacks them, libbpf refuses
the object and the test skips with libbpf's words (tasks.load_kfunc_object).

The test fsyncs a file of its own while tracing the program: the record in .bss
(the file's inode, the range and datasync of the call, our pid), the count and the
printk line prove it ran; the trace has to show every helper and kfunc by the name
the C source wrote (the kfuncs' own names: the macros are the C's, not libbpf's).
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import (
    assert_called,
    global_vars,
    lost_program_calls,
    printk_lines,
    set_global,
)
from tests.conformance.tasks import load_kfunc_object

PROG = "record_fsync"
#: struct fsync_record: ino, start, end, tgid, datasync.
RECORD = struct.Struct("<QqqQq")
#: What fsync(2) asks vfs_fsync_range for: the whole file, data and metadata.
LLONG_MAX = (1 << 63) - 1
HELPERS = (
    "bpf_get_current_pid_tgid",
    "bpf_obj_new_impl",
    "BPF_CORE_READ",
    "bpf_printk",
    "bpf_obj_drop_impl",
)


@pytest.mark.allow_skip  # Linux 6.1 has no bpf_obj_new (it came with 6.2)
@pytest.mark.program_type("fentry (obj_new kfuncs)")
def test_fentry_allocates_and_drops_an_object_per_fsync(bpf, lbr, built, tmp_path):
    obj = load_kfunc_object(bpf, built("obj_new"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)
    synced = tmp_path / "obj-new-fsync-me"
    synced.write_bytes(b"data\n")
    ino = synced.stat().st_ino

    fd = os.open(synced, os.O_WRONLY | os.O_APPEND)
    try:
        with prog.attach():  # SEC("fentry/vfs_fsync_range")
            with lbr.trace(prog) as trace:
                os.write(fd, b"more\n")
                os.fsync(fd)
    finally:
        os.close(fd)

    found = global_vars(obj)
    assert RECORD.unpack(found["last"]) == (ino, 0, LLONG_MAX, pid, 0), found["last"]
    assert int.from_bytes(found["records"], "little") == 1
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"obj_new: fsync of inode {ino} by {pid}" in printed, printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == pid], text
    assert_called(trace, PROG, HELPERS)
    # bpf_obj_new_impl and bpf_obj_drop_impl reach irq_work_queue through
    # bpf_mem_alloc / bpf_mem_free (kernel/bpf/memalloc.c, notrace): that call has
    # an unseen caller, and loses no call of the program (as test_tp_btf.py's).
    assert not lost_program_calls(trace), text
