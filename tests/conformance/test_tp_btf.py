"""tp_btf.bpf.c: a BTF-typed tracepoint program (SEC("tp_btf/sched_process_fork")):
parent and child arrive as `struct task_struct *`, read directly and with
BPF_CORE_READ. For each fork of this process the child gets task-local storage
(bpf_task_storage_get on a BPF_MAP_TYPE_TASK_STORAGE map) saying who forked it
and when (bpf_ktime_get_ns), a .bss counter and a bpf_printk line.

The test starts a child (`sleep`) while tracing the program: the tracepoint fires
in this process, the parent. The child's own task storage, read through a pidfd of
the child (the key user space uses for a task storage map) while it still lives,
the counter and the printk line prove it ran; the trace has to show every helper by
the name the C source wrote. The second test does the same with kfuncs
(task_kfuncs.bpf.c), which Linux 6.1 lacks.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time

import pytest

from tests.conformance.evidence import (
    assert_called,
    global_vars,
    lost_program_calls,
    printk_lines,
    set_global,
)
from tests.conformance.tasks import load_kfunc_object

PROG = "handle_fork"
#: struct fork_info: parent_tgid, child_pid, forked_ns.
INFO = struct.Struct("<IIQ")
HELPERS = ("bpf_task_storage_get", "BPF_CORE_READ", "bpf_ktime_get_ns", "bpf_printk")


@pytest.mark.program_type("tp_btf")
def test_tp_btf_gives_the_forked_child_task_storage(bpf, lbr, built):
    obj = bpf.load(built("tp_btf"))
    prog = obj.programs[PROG]
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)

    with prog.attach():  # SEC("tp_btf/sched_process_fork")
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        with lbr.trace(prog) as trace:
            child = subprocess.Popen(["sleep", "60"])
    try:
        pidfd = os.pidfd_open(child.pid)
        try:
            raw = obj.maps["forks"].lookup(pidfd)
        finally:
            os.close(pidfd)
    finally:
        child.kill()
        child.wait()

    # The child's own storage: forked by us, at a time after `before`.
    assert raw is not None, "no task storage for the child"
    parent_tgid, child_pid, forked_ns = INFO.unpack(raw)
    assert (parent_tgid, child_pid) == (pid, child.pid)
    assert forked_ns >= before
    # At least ours: the program stays attached around the trace, and this process
    # may fork more there (the 6.1 guest counted 3).
    (forks_seen,) = struct.unpack("<Q", global_vars(obj)["forks_seen"])
    assert forks_seen >= 1
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"fork: {pid} -> {child.pid}" in printed, printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == pid], text
    assert_called(
        trace,
        "handle_fork",
        (
            "bpf_task_storage_get",
            "BPF_CORE_READ",
            "bpf_ktime_get_ns",
            "bpf_printk",
        ),
    )
    assert not lost_program_calls(trace), text  # irq_work_queue: 3 notrace calls down


KFUNCS = ("bpf_task_acquire", "bpf_rcu_read_lock", "bpf_rcu_read_unlock", "bpf_task_release")


@pytest.mark.allow_skip  # Linux 6.1 has none of these kfuncs (they came with 6.2)
@pytest.mark.program_type("tp_btf (kfuncs)")
def test_tp_btf_holds_the_child_with_kfuncs(bpf, lbr, built):
    """task_kfuncs.bpf.c: the same tracepoint holding the child with bpf_task_acquire /
    bpf_task_release and reading its real_parent inside bpf_rcu_read_lock /
    bpf_rcu_read_unlock. Those kfuncs came with Linux 6.2 (commits 90660309b0c7 and
    9bb00b2895cb): where the kernel's BTF lacks them, libbpf refuses the object and
    the test skips with libbpf's words."""
    obj = load_kfunc_object(bpf, built("task_kfuncs"))
    prog = obj.programs["fork_kfuncs"]
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)

    with prog.attach():  # SEC("tp_btf/sched_process_fork")
        with lbr.trace(prog) as trace:
            child = subprocess.Popen(["true"])
    assert child.wait() == 0

    seen = {name: int.from_bytes(raw, "little") for name, raw in global_vars(obj).items()}
    assert seen == {"target_tgid": pid, "child_pid": child.pid, "parent_tgid": pid}, seen
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"kfuncs: child {child.pid} of {pid}" in printed, printed

    text = trace.edges()
    assert [h for h in trace.hits if h.pid == pid], text
    assert_called(
        trace,
        "fork_kfuncs",
        (
            "bpf_task_acquire",
            "bpf_rcu_read_lock",
            "bpf_rcu_read_unlock",
            "bpf_task_release",
            "bpf_printk",
        ),
    )
    assert "(unseen caller)" not in text, text
