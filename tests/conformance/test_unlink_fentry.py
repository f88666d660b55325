"""unlink_fentry.bpf.c: fentry and fexit programs on do_unlinkat (BPF trampolines),
written as libbpf-bootstrap's fentry.bpf.c is: BPF_PROG for typed arguments, the
file name read straight from `struct filename`, a bpf_printk line each, and a
process filter user space sets after load in a .bss variable (`skel->bss->...` in
a skeleton; here through the object's .bss map).

The test unlinks a file of its own while tracing both programs; their printk lines
prove they ran (fexit with unlink's result), and the trace has to show the helpers
of each program by the names the C source wrote.
"""

from __future__ import annotations

import os

import pytest

from tests.conformance.evidence import (
    assert_called,
    printk_lines,
    section_map,
)

HELPERS = ("bpf_get_current_pid_tgid", "bpf_printk")


@pytest.mark.program_type("fentry/fexit")
def test_fentry_and_fexit_see_our_unlink(bpf, lbr, built, tmp_path):
    obj = bpf.load(built("unlink_fentry"))
    pid = os.getpid()
    section_map(obj, ".bss").update(0, pid)  # target_tgid: only this process's unlinks
    entry, exit_ = obj.programs["unlink_entry"], obj.programs["unlink_exit"]
    victim = tmp_path / f"unlink-me-{pid}"
    victim.write_bytes(b"")

    with entry.attach(), exit_.attach():  # SEC("fentry/do_unlinkat"), SEC("fexit/do_unlinkat")
        with lbr.trace(entry, exit_) as trace:
            os.unlink(victim)

    assert not victim.exists()
    # Both programs ran in this process: their own printk lines.
    printed = [line.message for line in printk_lines() if line.tid == pid]
    assert f"fentry: pid = {pid}, filename = {victim}" in printed, printed
    assert f"fexit: pid = {pid}, ret = 0" in printed, printed

    text = trace.edges()
    # One run of each program, and none of the trampoline's own work in them.
    assert sorted(h.target for h in trace.hits) == [
        "prog:name:unlink_entry",
        "prog:name:unlink_exit",
    ], text
    for hit in trace.hits:
        for name in hit.functions():
            assert not name.startswith(("__bpf_prog_", "bpf_trampoline_", "migrate_")), text
    assert {h.pid for h in trace.hits} == {pid}, text
    assert_called(trace, "unlink_entry", ("bpf_get_current_pid_tgid", "bpf_printk"))
    assert_called(trace, "unlink_exit", ("bpf_get_current_pid_tgid", "bpf_printk"))
    assert "(unseen caller)" not in text, text
