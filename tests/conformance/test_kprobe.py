"""kprobe.bpf.c: a kprobe and a kretprobe on do_unlinkat (SEC("kprobe/do_unlinkat"),
SEC("kretprobe/do_unlinkat"), BPF_KPROBE / BPF_KRETPROBE), as latency tools are
written: the entry keeps a start time (bpf_ktime_get_ns) and the file name
(BPF_CORE_READ, bpf_probe_read_kernel_str) in a hash map keyed by thread; the
return looks it up, sends an event through a perf event array
(bpf_perf_event_output) and deletes the entry.

The test unlinks a file of its own while tracing both programs. The event read from
the perf buffer (our pid, unlink's result 0, the file's name, a duration) proves both
ran, in order; the hash map is empty again. The trace has to show every helper of
each program by the name the C source wrote.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import PerfBuffer, assert_called, set_global

#: struct unlink_event: pid, ret, delta_ns, filename[64].
EVENT = struct.Struct("<iiQ64s")
ENTER_HELPERS = (
    "bpf_get_current_pid_tgid",
    "bpf_ktime_get_ns",
    "BPF_CORE_READ",
    "bpf_probe_read_kernel_str",
    "bpf_map_update_elem",
)
RETURN_HELPERS = (
    "bpf_get_current_pid_tgid",
    "bpf_map_lookup_elem",
    "bpf_ktime_get_ns",
    "bpf_perf_event_output",
    "bpf_map_delete_elem",
)


@pytest.mark.program_type("kprobe")
def test_kprobe_and_kretprobe_time_our_unlink(bpf, lbr, built, tmp_path):
    obj = bpf.load(built("kprobe"))
    pid = os.getpid()
    set_global(obj, "target_tgid", pid)
    enter, ret = obj.programs["unlink_enter"], obj.programs["unlink_return"]
    victim = tmp_path / f"kprobe-{pid}"
    victim.write_bytes(b"")

    with PerfBuffer(obj.maps["events"]) as events:
        with enter.attach(), ret.attach():  # SEC("kprobe/do_unlinkat"), SEC("kretprobe/...")
            with lbr.trace(enter, ret) as trace:
                os.unlink(victim)
        records = events.consume()
    assert events.lost == 0

    assert not victim.exists()
    decoded = [EVENT.unpack(r[: EVENT.size]) for r in records]
    assert len(decoded) == 1, decoded
    (ev_pid, ev_ret, delta_ns, filename) = decoded[0]
    # The name as unlink(2) got it, cut to the program's 64-byte buffer.
    name = filename.split(b"\0", 1)[0]
    assert (ev_pid, ev_ret, name) == (pid, 0, os.fsencode(victim)[:63]), decoded
    assert delta_ns > 0
    assert list(obj.maps["starts"].keys()) == []  # the return deleted what the entry put

    text = trace.edges()
    assert sorted(h.target for h in trace.hits) == [
        "prog:name:unlink_enter",
        "prog:name:unlink_return",
    ], text
    assert_called(
        trace,
        "unlink_enter",
        (
            "bpf_get_current_pid_tgid",
            "bpf_ktime_get_ns",
            "BPF_CORE_READ",
            "bpf_probe_read_kernel_str",
            "bpf_map_update_elem",
        ),
    )
    assert_called(
        trace,
        "unlink_return",
        (
            "bpf_get_current_pid_tgid",
            "bpf_map_lookup_elem",
            "bpf_ktime_get_ns",
            "bpf_perf_event_output",
            "bpf_map_delete_elem",
        ),
    )
    assert "(unseen caller)" not in text, text
