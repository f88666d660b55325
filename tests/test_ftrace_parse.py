"""Parsing and call reconstruction of real function-tracer text (tests/data).

The data files are cut from traces the graph backend captured in the 6.1 and
6.12 guests (header kept): BPF_PROG_TEST_RUNs of an XDP program calling
helpers and a subprogram (one run; two runs), a write(2) to /dev/null with
the kretprobe event of vfs_write, and an LRU hash update (as a program run in
both kernels, and as a kfunc with its kretprobe event in 6.12).
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.capture.graph.backend import probe_graph
from pytest_lbr.capture.graph.calls import BPF_SYMBOL_RE, reconstruct
from pytest_lbr.capture.graph.hits import build_hits, descendants
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord, parse_trace
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.kernel import tracefs
from pytest_lbr.model import UNSEEN_CALLER, Branch, Hit, Trace
from pytest_lbr.model.text import CallFrame, call_tree
from pytest_lbr.noise import FTRACE_OWN_PARENTS
from pytest_lbr.targets import parse_target

DATA = Path(__file__).parent / "data"
XDP_RUNS = ["ftrace-6.12-xdp_helpers.txt", "ftrace-6.1-xdp_test_run.txt"]


def _records(name: str) -> list[FunctionRecord | EventRecord]:
    return parse_trace((DATA / name).read_text())


def _prog_ksyms(records: list[FunctionRecord | EventRecord]) -> set[str]:
    """The kallsyms names of the program (and its subprograms) seen in the data."""
    names = {
        r.parent
        for r in records
        if isinstance(r, FunctionRecord) and r.parent and BPF_SYMBOL_RE.match(r.parent)
    }
    assert names, "no BPF program in the data"
    return names


def test_parse_function_and_event_lines() -> None:
    text = (DATA / "ftrace-6.12-vfs_write.txt").read_text()
    records = parse_trace(text)
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(records) == len(body)
    vfs = next(r for r in records if isinstance(r, FunctionRecord) and r.func == "vfs_write")
    # "vfs_write+0x4/0x450 <ffffffff92c57c14> <-ksys_write+0x6f/0xf0 <ffffffff92c5823f>"
    assert vfs.func_addr == 0xFFFFFFFF92C57C14 - 4
    assert (vfs.parent, vfs.parent_off, vfs.parent_addr) == ("ksys_write", 0x6F, 0xFFFFFFFF92C5823F)
    assert vfs.ts_ns == 78_097_756_000 and vfs.cpu == 0
    events = [r for r in records if isinstance(r, EventRecord)]
    assert [e.name for e in events] == ["e0"]
    assert events[0].body.endswith("ret=1")


@pytest.mark.parametrize("name", XDP_RUNS)
def test_reconstruct_balances_calls_and_returns(name: str) -> None:
    recs = [r for r in _records(name) if isinstance(r, FunctionRecord) and not r.in_irq]
    steps = list(reconstruct(recs))
    calls = [s.frame for s in steps if s.kind == "call"]
    rets = [s.frame for s in steps if s.kind == "ret"]
    assert sorted(map(id, calls)) == sorted(map(id, rets))
    # Every recorded call is nested under its parent.
    for s in steps:
        if s.kind == "call" and isinstance(s.record, FunctionRecord) and s.record.parent:
            assert s.stack[-2].func == s.record.parent


def _program_trace(name: str) -> Trace:
    records = _records(name)
    ksyms = _prog_ksyms(records)
    target = parse_target("prog:name:xdp_helpers")
    return Trace(hits=build_hits([target], [lambda f, a: f in ksyms], {}, {}, records))


def _assert_program_scope(hit: Hit) -> None:
    """Every call is made by the program or by the innermost open frame, and
    every return matches the innermost open frame (nothing of the machinery).
    A frame entered unseen (a caller ftrace never recorded: notrace or inlined,
    e.g. htab_lock_bucket) is an explicit "unseen" frame."""
    open_frames: list[Branch] = []
    for b in hit.branches:
        src, dst = b.src.symbol or "", b.dst.symbol or ""
        if b.kind == "call":
            if BPF_SYMBOL_RE.match(src):
                assert not open_frames, f"{b}: the program's previous call is still open"
            else:
                assert open_frames and open_frames[-1].dst.symbol == src, f"{b}: caller not open"
            open_frames.append(b)
        elif b.kind == "unseen":
            assert b.src == UNSEEN_CALLER
            open_frames.append(b)
        else:
            assert b.kind == "ret" and open_frames, b
            frame = open_frames.pop()
            assert (src, dst) == (frame.dst.symbol, frame.src.symbol), (
                f"{b} does not return {frame}"
            )
    assert not open_frames


@pytest.mark.parametrize("name", XDP_RUNS)
def test_bpf_program_run_is_one_hit(name: str) -> None:
    trace = _program_trace(name)
    assert len(trace.hits) == 1, str(trace)
    assert trace.called("bpf_csum_diff", by="bpf_prog_*_xdp_helpers")
    assert trace.called("bpf_xdp_adjust_head", by="bpf_prog_*_xdp_helpers")
    assert trace.called("__htab_map_lookup_elem", by="bpf_prog_*_xdp_helpers")
    assert trace.called("csum_partial", by="bpf_csum_diff")
    # Nothing of BPF_PROG_TEST_RUN around the program.
    for machinery in ("bpf_test_*", "bpf_cgroup_storage_*", "kfree", "bpf_ctx_*", "migrate_*"):
        assert not any(
            fnmatch.fnmatchcase(b.src.symbol or "", machinery)
            or fnmatch.fnmatchcase(b.dst.symbol or "", machinery)
            for b in trace.hits[0].branches
        ), (machinery, str(trace))
    _assert_program_scope(trace.hits[0])
    # The last thing the program did was bpf_xdp_adjust_head, and it returned.
    last = trace.hits[0].branches[-1]
    assert (last.kind, last.src.symbol) == ("ret", "bpf_xdp_adjust_head"), str(trace)


def test_two_test_runs_are_two_hits() -> None:
    # Two BPF_PROG_TEST_RUN calls of xdp_helpers (6.12 guest, softirq records kept).
    trace = _program_trace("ftrace-6.12-xdp_two_runs.txt")
    assert len(trace.hits) == 2, str(trace)
    for hit in trace.hits:
        _assert_program_scope(hit)
        assert Trace(hits=[hit]).called("bpf_csum_diff", by="bpf_prog_*_xdp_helpers")
        assert (hit.branches[-1].kind, hit.branches[-1].src.symbol) == (
            "ret",
            "bpf_xdp_adjust_head",
        )
    # The subprogram note_cpu (its own tag and symbol) is part of the program.
    assert trace.called("array_map_update_elem", by="bpf_prog_*_note_cpu")


def test_kfunc_hit_with_retval_and_tracer_frames_trimmed() -> None:
    records = _records("ftrace-6.12-vfs_write.txt")
    target = parse_target("kfunc:vfs_write")
    hits = build_hits(
        [target], [lambda f, a: f == "vfs_write"], {0: "e0"}, {"e0": "vfs_write"}, records
    )
    trace = Trace(hits=hits)
    assert len(hits) == 1
    hit = hits[0]
    assert hit.retval == 1
    assert trace.has_path("ksys_write", "vfs_write", "rw_verify_area", "write_null")
    assert hit.branches[0].kind == "call" and hit.branches[-1].kind == "ret"
    assert hit.branches[-1].dst.symbol == "ksys_write"
    # The kretprobe's handlers are in raw_branches only.
    assert not trace.called("kprobe_ftrace_handler") and not trace.called(
        "kretprobe_rethook_handler"
    )
    assert any(b.dst.symbol == "kprobe_ftrace_handler" for b in hit.raw_branches)
    # Nothing after vfs_write returned (the close(2) that followed).
    assert not trace.called("file_close_fd")


def _vfs_write_lines() -> tuple[str, str, str]:
    """The data's vfs_write entry, its first callee's (rw_verify_area), its return event."""
    lines = (DATA / "ftrace-6.12-vfs_write.txt").read_text().splitlines()
    entry = next(x for x in lines if ": vfs_write+0x4/" in x)
    callee = next(x for x in lines if ": rw_verify_area+0x4/" in x)
    ret = next(x for x in lines if ": e0: (" in x)
    return entry, callee, ret


def _at(line: str, seconds: str) -> str:
    return re.sub(r" \d+\.\d+: ", f" {seconds}: ", line, count=1)


def _vfs_write_hits(lines: list[str]) -> list[Hit]:
    return build_hits(
        [parse_target("kfunc:vfs_write")],
        [lambda f, a: f == "vfs_write"],
        {0: "e0"},
        {"e0": "vfs_write"},
        parse_trace("\n".join(lines)),
    )


def test_a_recursive_call_stays_in_its_hit() -> None:
    """vfs_write entered again from one of its callees (the data's lines, with the
    callee's real call site as the inner call's parent): one hit, ended by the outer
    call's return event."""
    entry, callee, ret = _vfs_write_lines()
    inner = _at(entry, "78.097785").replace(
        "<-ksys_write+0x6f/0xf0 <ffffffff92c5823f>",
        "<-rw_verify_area+0x42/0x120 <ffffffff92c54e22>",
    )
    inner_ret = _at(ret, "78.097786").replace("ret=1", "ret=7")
    (hit,) = _vfs_write_hits([entry, callee, inner, inner_ret, ret])
    assert hit.retval == 1
    assert [b.dst.symbol for b in hit.branches if b.kind == "call"].count("vfs_write") == 2


def test_a_lost_return_event_does_not_swallow_the_next_call() -> None:
    """The ring buffer overran and dropped a write's return event: the next write,
    called from the same place, shows that the first returned. Two hits, the first
    without a return value, not one hit holding every later write."""
    entry, callee, ret = _vfs_write_lines()
    second = [_at(entry, "78.098756"), _at(callee, "78.098784"), _at(ret, "78.098820")]
    first, then = _vfs_write_hits([entry, callee, *second])
    assert (first.retval, then.retval) == (None, 1)
    assert [b.dst.symbol for b in first.branches if b.kind == "call"] == [
        "vfs_write",
        "rw_verify_area",
    ]


def test_tracepoint_event_names() -> None:
    line = "          python-244     [000] .....    33.602725: sys_getppid()"
    (rec,) = parse_trace(line)
    assert isinstance(rec, EventRecord)
    target = parse_target("tp:syscalls/sys_enter_getppid")
    hits = build_hits([target], [lambda f, a: False], {0: "sys_enter_getppid"}, {}, [rec])
    assert len(hits) == 1 and hits[0].tid == 244


def test_probe_reason_on_this_machine() -> None:
    cap = probe_graph()
    if os.geteuid() != 0:
        assert cap.reason == "the graph backend needs root (ftrace); run as root"
    elif cap.available:
        pytest.skip("the function tracer works here: nothing to explain")
    else:
        assert cap.reason, "an unavailable backend must say why"


def test_cleanup_removes_dead_process_instances() -> None:
    if os.geteuid() != 0:
        pytest.skip("creating tracefs instances needs root")
    root = tracefs.find_tracefs()
    if root is None or not (root / "instances").is_dir():
        pytest.skip("no tracefs with instances here")
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    stale = root / "instances" / f"{tracefs.INSTANCE_PREFIX}-{pid}-1"
    mine = tracefs.Instance(root, buffer_kb=4)
    try:
        os.mkdir(stale)
        removed = tracefs.cleanup_stale_instances(root)
        assert stale.name in removed and not stale.exists()
        assert mine.path.exists(), "a live process's instance must survive"
    finally:
        mine.close()
        if stale.exists():
            os.rmdir(stale)
    assert not mine.path.exists()


def test_a_misnested_record_cannot_split_one_call_into_two_hits() -> None:
    """Call-only records can pop the target's frame early (a record naming the
    caller while the function still runs); the kretprobe event marks the real
    return, so one call stays one hit (tcp_v4_connect was seen split in 2-3)."""
    lines = (DATA / "ftrace-6.12-vfs_write.txt").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "write_null+0x4" in line)
    stray = lines[at].replace("78.097807", "78.097800").split(": write_null")[0] + (
        ": __fdget_pos+0x4/0x50 <ffffffff92c00004> <-ksys_write+0x30/0xf0 <ffffffff92c58200>"
    )
    records = parse_trace("\n".join([*lines[:at], stray, *lines[at:]]))
    hits = build_hits(
        [parse_target("kfunc:vfs_write")],
        [lambda f, a: f == "vfs_write"],
        {0: "e0"},
        {"e0": "vfs_write"},
        records,
    )
    assert len(hits) == 1, [h.functions() for h in hits]
    assert hits[0].retval == 1
    assert Trace(hits=hits).called("write_null")


def test_glob_matching_over_the_whole_file_agrees_with_fnmatch() -> None:
    """matching_functions (one regex) picks exactly what fnmatch would, line by line,
    on this machine's real kernel function names (kallsyms) in the file's format."""
    import fnmatch

    from pytest_lbr.kernel.functions import matching_functions

    names = []
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if parts[1] in "tT" and len(parts) >= 3:
                names.append((parts[2], parts[3] if len(parts) > 3 else None))
    assert len(names) > 10_000
    # the file lists module functions as "name [module]"
    text = "\n".join(f"{n} {m}" if m else n for n, m in names) + "\n"
    for pattern in (
        "tcp_*",
        "vfs_write",
        "*_rcv",
        "ip?_*",
        "sk_[a-f]*",
        "x[!a-y]*",
        "[]]*",
        "a*b*c",
    ):
        want = [n for n, _ in names if fnmatch.fnmatchcase(n, pattern)]
        assert matching_functions(text, pattern) == want, pattern
        core = [n for n, m in names if m is None and fnmatch.fnmatchcase(n, pattern)]
        assert matching_functions(text, pattern, modules=False) == core, pattern
    assert matching_functions(text, "tcp_*")  # the check above was not vacuous


def _interrupt_in_the_middle(text: str, after: str) -> str:
    """The same capture with its own timer interrupt (irq_enter_rcu .. idle_cpu,
    real lines recorded earlier in the same guest) moved to just after the line
    containing `after`: what a timer tick in the middle of a program run records."""
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    start = next(i for i, ln in enumerate(body) if "irq_enter_rcu+" in ln)
    end = next(i for i, ln in enumerate(body) if "idle_cpu+" in ln and i > start)
    block, rest = body[start : end + 1], body[:start] + body[end + 1 :]
    at = next(i for i, ln in enumerate(rest) if after in ln)
    stamp = rest[at].split(": ", 1)[0].split()[-1]  # the timestamp of that line
    moved = [re.sub(r"\d+\.\d+(?=: )", stamp, ln, count=1) for ln in block]
    return "\n".join(head + rest[: at + 1] + moved + rest[at + 1 :]) + "\n"


def _cpu_stamp_hits(text: str) -> list[Hit]:
    records = parse_trace(text)
    ksyms = _prog_ksyms(records)
    target = parse_target("prog:name:cpu_stamp")
    return build_hits([target], [lambda f, a: f in ksyms], {}, {}, records)


def test_timer_interrupt_inside_a_program_run_changes_nothing() -> None:
    """6.1 guest, cpu_stamp: a tick between two of the program's calls (and one
    inside a helper, under htab_lock_bucket's lock) leaves one hit with exactly
    the calls of the quiet run: no split, no machinery, no call hidden."""
    text = (DATA / "ftrace-6.1-cpu_stamp.txt").read_text()
    quiet = _cpu_stamp_hits(text)
    assert len(quiet) == 1
    assert Trace(hits=quiet).functions()[:3] == [
        "bpf_prog_2d7664d87015412e_cpu_stamp",
        "bpf_get_smp_processor_id",
        "bpf_prog_2d7664d87015412e_cpu_stamp",
    ]
    for after in ("__htab_map_lookup_elem+0x0", "htab_map_update_elem+0x0", "lookup_elem_raw+0x0"):
        noisy = _cpu_stamp_hits(_interrupt_in_the_middle(text, after))
        assert len(noisy) == 1, (after, [str(Trace(hits=[h])) for h in noisy])
        assert noisy[0].branches == quiet[0].branches, after
        _assert_program_scope(noisy[0])


# -- callers the function tracer never records ------------------------------------
#
# An LRU hash update of a new key (prog xdp_lru, tests/bpf) in both guests: after
# bpf_lru_pop_free's spin_unlock_irqrestore, htab_lru_map_update_elem locks the
# bucket through htab_lock_bucket, an out-of-line copy of a kernel `inline`
# function, which is notrace: "_raw_spin_lock <- htab_lock_bucket" names a caller
# no record entered. Nesting it under the top of the stack put the lock under
# _raw_spin_unlock_irqrestore, a call path the kernel never took.
LRU_RUNS = ["ftrace-6.12-lru_update.txt", "ftrace-6.1-lru_update.txt"]


def _tree_edges(hit: Hit) -> set[tuple[str, str]]:
    """(parent, child) of every frame of the call tree of `hit` (`str(trace)`'s and the
    report's), each named by its function and how it was entered."""
    edges: set[tuple[str, str]] = set()

    def name(frame: CallFrame) -> str:
        return f"{frame.function} {frame.note}" if frame.note else frame.function

    def walk(frame: CallFrame) -> None:
        for child in frame.children:
            edges.add((name(frame), name(child)))
            walk(child)

    walk(call_tree(hit))
    return edges


@pytest.mark.parametrize("name", LRU_RUNS)
def test_an_unseen_caller_is_an_explicit_frame_under_a_running_one(name: str) -> None:
    records = _records(name)
    ksyms = _prog_ksyms(records)
    target = parse_target("prog:name:xdp_lru")
    trace = Trace(hits=build_hits([target], [lambda f, a: f in ksyms], {}, {}, records))
    assert len(trace.hits) == 1, str(trace)
    hit = trace.hits[0]
    _assert_program_scope(hit)
    edges = _tree_edges(hit)
    assert ("htab_lru_map_update_elem", "htab_lock_bucket (caller not recorded)") in edges, edges
    assert ("htab_lock_bucket (caller not recorded)", "_raw_spin_lock") in edges, edges
    assert not any(parent == "_raw_spin_unlock_irqrestore" for parent, _ in edges), edges
    unseen = [b for b in hit.branches if b.kind == "unseen"]
    assert [(b.src, b.dst.symbol) for b in unseen] == [(UNSEEN_CALLER, "htab_lock_bucket")]
    # The unseen frame is no call edge: golden traces and called() do not change.
    assert trace.called("_raw_spin_lock", by="htab_lock_bucket")
    assert "(unseen caller)" not in trace.functions()
    assert "(unseen caller)" in trace.edges()


def test_kretprobe_handlers_before_the_entry_do_not_hide_the_call() -> None:
    # kfunc:htab_lru_map_update_elem (6.12 guest): the kretprobe's entry handler
    # records ("kprobe_ftrace_handler <- arch_ftrace_ops_list_func") come before
    # the function's own record, under a caller never recorded. Left open, they
    # hid the whole hit: it held one stray return.
    records = _records("ftrace-6.12-lru_update_kfunc.txt")
    fn = "htab_lru_map_update_elem"
    target = parse_target(f"kfunc:{fn}")
    hits = build_hits([target], [lambda f, a: f == fn], {0: "e1"}, {"e1": fn}, records)
    trace = Trace(hits=hits)
    assert len(hits) == 1 and hits[0].retval == 0, str(trace)
    assert trace.has_path(fn, "prealloc_lru_pop", "bpf_lru_pop_free"), str(trace)
    assert trace.called("_raw_spin_lock", by="htab_lock_bucket"), str(trace)
    assert trace.called("lookup_elem_raw", by=fn), str(trace)
    assert (hits[0].branches[0].kind, hits[0].branches[0].dst.symbol) == ("call", fn)
    assert (hits[0].branches[-1].kind, hits[0].branches[-1].src.symbol) == ("ret", fn)


def _two_runs_with_their_hook() -> tuple[list[FunctionRecord | EventRecord], set[str], list]:
    """(records, the program's ksyms, the fexit hook's clock reads) of two runs of
    xdp_helpers in the 6.12 guest, with the graph backend's fexit hook on it."""
    records = _records("ftrace-6.12-xdp_fexit.txt")
    ksyms = _prog_ksyms(records) - {
        r.parent for r in records if isinstance(r, FunctionRecord) and "_lbr_" in (r.parent or "")
    }
    clock = [
        r
        for r in records
        if isinstance(r, FunctionRecord)
        and r.func == "bpf_ktime_get_ns"
        and "_lbr_" in (r.parent or "")
    ]
    return records, ksyms, clock


def test_the_return_value_hook_is_not_part_of_the_program_run() -> None:
    # Two BPF_PROG_TEST_RUNs of xdp_helpers (pass, then drop) in the 6.12 guest with
    # the graph backend's fexit hook on the program: its trampoline helpers
    # (__bpf_tramp_enter, __bpf_prog_enter_recur: notrace, seen as parents only)
    # and the tracer program's helper calls follow each run. The hook's record
    # time is when it called bpf_ktime_get_ns, as the tracer's records say.
    records, ksyms, clock = _two_runs_with_their_hook()
    assert len(clock) == 2
    exits = {
        0: [
            RawHit(0, r.cpu, r.tid, r.tid, r.ts_ns, v, -2)
            for r, v in zip(clock, (2, 1), strict=True)
        ]
    }
    target = parse_target("prog:name:xdp_helpers")
    hits = build_hits([target], [lambda f, a: f in ksyms], {}, {}, records, None, exits)
    assert [h.retval for h in hits] == [2, 1], str(Trace(hits=hits))
    for hit in hits:
        _assert_program_scope(hit)
        for b in hit.raw_branches:
            for loc in (b.src, b.dst):
                assert "_lbr_" not in (loc.symbol or ""), b
                assert not (loc.symbol or "").startswith(("bpf_ringbuf", "__bpf_", "migrate_")), b
    # The pass run ends with bpf_xdp_adjust_head; the drop run returns before it.
    assert hits[0].branches[-1].src.symbol == "bpf_xdp_adjust_head"
    assert not Trace(hits=[hits[1]]).called("bpf_xdp_adjust_head")
    # Without the hook's times the trampoline still ends each run (its entry,
    # __bpf_prog_enter_recur, is no call of the program): the hook's work is
    # not the program's, and both runs keep their calls.
    unhooked = build_hits([target], [lambda f, a: f in ksyms], {}, {}, records)
    assert [len(h.branches) for h in unhooked] == [len(h.branches) for h in hits]
    assert not any(
        (loc.symbol or "").startswith("bpf_ringbuf")
        for h in unhooked
        for b in h.raw_branches
        for loc in (b.src, b.dst)
    )


def test_a_run_that_called_nothing_is_a_hit_with_its_return_value() -> None:
    records = _records("ftrace-6.12-xdp_fexit.txt")
    first = next(r for r in records if isinstance(r, FunctionRecord))
    target = parse_target("prog:name:xdp_pass_with_a_long_name")
    exits = {0: [RawHit(0, 0, first.tid, first.tid, first.ts_ns + 5, 2, -2)]}
    hits = build_hits([target], [lambda f, a: False], {}, {}, records, None, exits)
    assert [(h.retval, h.branches, h.tid) for h in hits] == [(2, [], first.tid)]


def test_children_are_found_from_the_fork_events() -> None:
    # scope="children" in the 6.1 guest: the test (python, 246) started a process
    # (252) while armed; its sched_process_fork event names both, and the child's
    # first records follow from ret_from_fork.
    records = _records("ftrace-6.1-fork.txt")
    assert descendants({246}, records) == {252}
    assert descendants({999}, records) == set()
    assert any(isinstance(r, FunctionRecord) and r.tid == 252 for r in records)
    # A grandchild: the child's own fork would name it as the parent.
    fork = next(r for r in records if isinstance(r, EventRecord))
    grandchild = EventRecord(
        252,
        0,
        fork.ts_ns + 1,
        fork.name,
        fork.body.replace("252", "260").replace("pid=246", "pid=252"),
    )
    assert descendants({246}, [*records, grandchild]) == {252, 260}


def test_arm64_kretprobed_function_gets_its_caller_from_the_return_event() -> None:
    # kfunc:tcp_v4_connect in the arm64 6.1 guest: the kretprobe (a breakpoint on
    # arm64) takes the link register, so ftrace prints "<-[unknown/kretprobe'd]";
    # the kretprobe's event names __inet_stream_connect, and the hit nests there.
    records = _records("ftrace-6.1-arm64-connect_kretprobe.txt")
    fn = "tcp_v4_connect"
    (entry,) = [r for r in records if isinstance(r, FunctionRecord) and r.func == fn]
    assert (entry.parent, entry.parent_off, entry.parent_addr) == (
        "__inet_stream_connect",
        0x108,
        0xFFFFDBB7B0F6ADB8,
    )
    target = parse_target(f"kfunc:{fn}")
    hits = build_hits([target], [lambda f, a: f == fn], {0: "e1"}, {"e1": fn}, records)
    trace = Trace(hits=hits)
    assert len(hits) == 1 and hits[0].retval == 0, str(trace)
    assert trace.has_path("__inet_stream_connect", fn, "tcp_connect"), str(trace)
    assert trace.called("ip_route_output_key_hash", by=fn), str(trace)
    # The breakpoint and return-trampoline handlers are the kretprobe's, not the test's.
    for handler in ("do_debug_exception", "kprobe_breakpoint_handler", "trampoline_probe_handler"):
        assert not trace.called(handler), str(trace)
    assert (hits[0].branches[-1].kind, hits[0].branches[-1].dst.symbol) == (
        "ret",
        "__inet_stream_connect",
    )


def test_arm64_softirq_on_the_irq_stack_is_not_the_threads_work() -> None:
    # kfunc:__sys_connect in the arm64 6.1 guest: softirqs that became pending ran
    # at local_bh_enable, on the irq stack ("____do_softirq <-call_on_irq_stack",
    # then __do_softirq) before the softirq bit was set; they are not the connect's.
    records = _records("ftrace-6.1-arm64-connect_softirq.txt")
    assert any(isinstance(r, FunctionRecord) and r.func == "____do_softirq" for r in records)
    fn = "__sys_connect"
    target = parse_target(f"kfunc:{fn}")
    hits = build_hits([target], [lambda f, a: f == fn], {0: "e2"}, {"e2": fn}, records)
    trace = Trace(hits=hits)
    assert len(hits) == 1, str(trace)
    assert trace.has_path(fn, "__sys_connect_file", "inet_stream_connect"), str(trace)
    assert trace.called("tcp_rbtree_insert", by="tcp_connect"), str(trace)
    for softirq in ("____do_softirq", "__do_softirq", "do_softirq_own_stack", "handle_softirqs"):
        assert not trace.called(softirq), softirq


def test_runs_of_a_narrowed_trace_are_cut_at_their_returns() -> None:
    # A system-wide trace narrowed to the program's calls (capture/graph/narrow.py)
    # records none of the BPF_PROG_TEST_RUN machinery between two runs: here the
    # two runs of the 6.12 guest's records above, keeping only the program's own
    # calls. The fexit records alone then say where one run ends.
    records, ksyms, clock = _two_runs_with_their_hook()
    narrowed = [r for r in records if isinstance(r, FunctionRecord) and r.parent in ksyms]
    target = parse_target("prog:name:xdp_helpers")
    merged = build_hits([target], [lambda f, a: f in ksyms], {}, {}, narrowed)
    assert len(merged) == 1  # nothing but the returns separates the runs
    exits = {
        0: [
            RawHit(0, r.cpu, r.tid, r.tid, r.ts_ns, v, -2)
            for r, v in zip(clock, (2, 1), strict=True)
        ]
    }
    hits = build_hits([target], [lambda f, a: f in ksyms], {}, {}, narrowed, None, exits)
    assert [h.retval for h in hits] == [2, 1], str(Trace(hits=hits))
    assert "bpf_xdp_adjust_head" in hits[0].functions()
    # The drop run made calls of its own and returned before bpf_xdp_adjust_head.
    assert hits[1].branches and "bpf_xdp_adjust_head" not in hits[1].functions()
    assert len(hits[0].branches) + len(hits[1].branches) == len(merged[0].branches)


class _NoSites:
    """A site finder for code that calls nothing (`SiteFinder`)."""

    def __call__(self, caller: str | None, start: int, callee: int, after: int = 0):
        return None

    def through(self, caller: str | None, start: int, callee: int, after: int = 0):
        return None


def test_an_unrecorded_function_gets_its_caller_where_the_callers_code_calls_it() -> None:
    # 6.12: htab_lock_bucket is notrace (an out-of-line inline); only its call of
    # _raw_spin_lock names it. htab_map_update_elem (0xffffffff92ad0d60, recorded)
    # calls it, at a return address that sits before its lookup_elem_raw call
    # (+0xe4): the site finder answers what that function's code holds.
    records = _records("ftrace-6.12-xdp_helpers.txt")
    update, lock = 0xFFFFFFFF92AD0D60, 0xFFFFFFFF92ACD100
    asked: list[tuple[str | None, int, int, int]] = []

    class Sites(_NoSites):
        def __call__(self, caller: str | None, start: int, callee: int, after: int = 0):
            asked.append((caller, start, callee, after))
            if (caller, start, callee) == ("htab_map_update_elem", update, lock):
                return caller, start, update + 0x5A
            return None

    site_of = Sites()

    target = parse_target("prog:name:xdp_helpers")
    ksyms = _prog_ksyms(records)
    matcher = [lambda f, a: f in ksyms]
    hits = build_hits([target], matcher, {}, {}, records, site_of=site_of)
    text = Trace(hits=hits).edges()
    assert "(unseen caller) -> htab_lock_bucket" not in text, text
    assert "htab_map_update_elem+0x5a -> htab_lock_bucket+0x0" in text, text
    assert "htab_lock_bucket+0x0 -> htab_map_update_elem+0x5a" in text, text
    # Where no caller's code calls it, the caller stays unknown, as before.
    unknown = build_hits([target], matcher, {}, {}, records, site_of=_NoSites())
    assert "(unseen caller) -> htab_lock_bucket" in Trace(hits=unknown).edges()
    assert ("htab_map_update_elem", update, lock, 0) in asked


def test_a_caller_two_unrecorded_levels_up_is_found_through_the_function_between() -> None:
    # 6.1: __cond_resched (recorded) reaches __schedule through preempt_schedule_common
    # (notrace), so __schedule's callees name a parent no frame's code calls. The
    # real records, with schedule's own record left out, have that shape: the site
    # finder says exit_to_user_mode_prepare calls schedule, which calls __schedule.
    records = [
        r for r in _records("ftrace-6.1-cpu_stamp.txt")
        if not (isinstance(r, FunctionRecord) and r.func == "schedule")
    ]  # fmt: skip
    exit_prep, sched, inner = 0xFFFFFFFF8BB469D0, 0xFFFFFFFF8C452DD0, 0xFFFFFFFF8C4523D0

    class Sites(_NoSites):
        def through(self, caller: str | None, start: int, callee: int, after: int = 0):
            if (caller, start, callee) == ("exit_to_user_mode_prepare", exit_prep, inner):
                return (caller, start, exit_prep + 0x17C), ("schedule", sched, sched + 0x4C)
            return None

    steps = [
        s for s in reconstruct(
            [r for r in records if isinstance(r, FunctionRecord) and not r.in_irq], site_of=Sites()
        )
        if s.kind == "call" and s.frame is not None and s.frame.func in ("schedule", "__schedule")
    ]  # fmt: skip
    assert [s.frame.func for s in steps if s.frame] == ["schedule", "__schedule"]
    first, second = (s.frame.call for s in steps if s.frame)
    assert first is not None and (first.parent, first.parent_off) == (
        "exit_to_user_mode_prepare",
        0x17C,
    )
    assert second is not None and (second.parent, second.parent_off) == ("schedule", 0x4C)
    # With no such path, __schedule's caller stays unknown.
    unknown = list(reconstruct(
        [r for r in records if isinstance(r, FunctionRecord) and not r.in_irq], site_of=_NoSites()
    ))  # fmt: skip
    assert any(s.frame and s.frame.func == "__schedule" and s.frame.call is None for s in unknown)


def test_records_of_the_function_tracers_own_pid_filter_are_dropped() -> None:
    # 6.1 guest: trace_pid_list_is_set (kernel/trace, built without -pg) runs on
    # sched_switch because the backend sets set_ftrace_pid; only its lock calls
    # are recorded. They are ftrace's own work, as clock reads are.
    records = _records("ftrace-6.1-cpu_stamp.txt")
    assert any(isinstance(r, FunctionRecord) and r.parent in FTRACE_OWN_PARENTS for r in records)
    sched, inner = 0xFFFFFFFF8C452DD0, 0xFFFFFFFF8C4523D0

    class Sites(_NoSites):  # schedule's code calls __schedule (6.1: schedule+0x4c)
        def __call__(self, caller: str | None, start: int, callee: int, after: int = 0):
            return ("schedule", sched, sched + 0x4C) if (start, callee) == (sched, inner) else None

    target = parse_target("kfunc:schedule")
    hits = build_hits([target], [lambda f, a: f == "schedule"], {}, {}, records, site_of=Sites())
    text = Trace(hits=hits).edges()
    assert "__schedule" in text and "trace_pid_list_is_set" not in text, text


def test_a_helper_two_programs_call_is_the_run_whose_return_comes_first() -> None:
    # 6.12 guest, system scope: on_connect4 and on_sockops (tests/conformance/sockets.bpf.c)
    # both call bpf_printk, whose bpf_trace_printk only its callees name. The connect4
    # run's printk came first; later the sockops run called bpf_sock_map_update and
    # then bpf_printk. The fexit returns (times between the runs' records) say whose
    # printk each was: the first must not end the sockops run as machinery would.
    records = _records("ftrace-6.12-socket_hooks.txt")
    connect4 = ("bpf_prog_fd01cf62e786c6e7_on_connect4", 0)
    sockops = ("bpf_prog_d6a16fe68beb1acb_on_sockops", 0xFFFFFFFFC01148E3 - 0x97)
    printk = 0xFFFFFFFF8D06ECC3 - 0x63
    at = {r.ts_ns: r for r in records if isinstance(r, FunctionRecord)}
    first = min(t for t, r in at.items() if r.func == "bpf_bprintf_cleanup")
    update = min(t for t, r in at.items() if r.func == "bpf_sock_map_update")
    printed = min(t for t, r in at.items() if r.func == "bpf_bprintf_cleanup" and t > update)

    class Sites(_NoSites):  # both programs' code calls bpf_trace_printk
        def __call__(self, caller: str | None, start: int, callee: int, after: int = 0):
            if callee == printk and (caller, start) in (connect4, sockops):
                return caller, start, start + 0xCC
            return None

    tid = next(r.tid for r in records if isinstance(r, FunctionRecord))
    exits = {
        0: [RawHit(0, 1, tid, tid, first + 10, 1, -2)],
        1: [RawHit(1, 0, tid, tid, printed + 10, 1, -2)],
    }
    targets = [parse_target("prog:name:on_connect4"), parse_target("prog:name:on_sockops")]
    matchers = [lambda f, a: f == connect4[0], lambda f, a: f == sockops[0]]
    starts = {0: [connect4], 1: [sockops]}
    hits = build_hits(
        targets, matchers, {}, {}, records, None, exits, site_of=Sites(), starts=starts
    )
    runs = [h for h in hits if h.target == "prog:name:on_sockops" and h.branches]
    assert runs, str(Trace(hits=hits))
    text = Trace(hits=runs[:1]).edges()
    assert "bpf_sock_map_update" in text and "-> bpf_trace_printk+0x0" in text, text


def test_an_exception_handler_is_entered_by_the_cpu_not_by_an_unseen_caller() -> None:
    # 6.12 guest: bpf_get_stack walking a user stack faulted; exc_page_fault is noinstr,
    # so only its callee names it ("do_user_addr_fault <-exc_page_fault").
    base = FunctionRecord(
        288, 1, 1000, False, "bpf_get_stack", 0xFFFFFFFF8D0C3000, "bpf_prog_0123456789abcdef_p",
        0x82, 0xFFFFFFFFC0100082, 288, "python3",
    )  # fmt: skip
    fault = FunctionRecord(
        288, 1, 1010, False, "do_user_addr_fault", 0xFFFFFFFF8C8A0000, "exc_page_fault",
        0x5A, 0xFFFFFFFF8D5C005A, 288, "python3",
    )  # fmt: skip
    target = parse_target("prog:name:p")
    hits = build_hits(
        [target], [lambda f, a: f.endswith("_p")], {}, {}, [base, fault], site_of=_NoSites()
    )
    text = Trace(hits=hits).edges()
    assert "(exception) -> exc_page_fault+0x0" in text, text
    assert "(unseen caller)" not in text, text
    assert "(exception)" not in Trace(hits=hits).functions()


def test_only_the_tracers_own_programs_are_its_work() -> None:
    # Our fexit hook's calls are the tracer's; the selftest's traced XDP program and a
    # user's program named lbr_init are traced code (a glob on "lbr_*" took both).
    from pytest_lbr.capture.graph.own import TracerOwn

    def rec(tid: int, parent: str) -> FunctionRecord:
        return FunctionRecord(
            tid, 0, 1, False, "bpf_get_current_pid_tgid", 0xFFFFFFFF8D0C2F40, parent,
            0x9C, 0xFFFFFFFFC0115070, tid, "python3",
        )  # fmt: skip

    own = TracerOwn()
    assert own.dropped(rec(1, "bpf_prog_bfded171c29bf2b5_lbr_fexit"))
    assert not own.dropped(rec(2, "bpf_prog_bfded171c29bf2b5_lbr_selftest"))
    assert not own.dropped(rec(3, "bpf_prog_bfded171c29bf2b5_lbr_init"))


def test_a_callback_a_helper_runs_is_the_caller_of_its_own_calls() -> None:
    # 6.12 guest, tests/conformance/find_vma.bpf.c: lookup_vma calls bpf_find_vma, which
    # runs the program's callback record_vma (a function of the program, entered through
    # a pointer: never recorded); record_vma calls bpf_probe_read_kernel (BPF_CORE_READ)
    # and bpf_probe_read_kernel_str, notrace, so only their callees name them. The
    # program's functions (jited ranges of that run) are lookup_vma at 0xffffffffc03e9650
    # and record_vma at 0xffffffffc03e9788; record_vma's code calls the two helpers. The
    # call sites are the ones that run's trace showed (its site finder read the code).
    records = _records("ftrace-6.12-find_vma.txt")
    main, callback = 0xFFFFFFFFC03E9650, 0xFFFFFFFFC03E9788
    read, read_str = 0xFFFFFFFF9226BF8C - 0x1C, 0xFFFFFFFF9226C13C - 0x1C
    find_vma, mt_find, printk = 0xFFFFFFFF92399190, 0xFFFFFFFF92CC3F00, 0xFFFFFFFF9226EC60
    sites = {
        (callback, read): 0xF9,
        (callback, read_str): 0x144,
        (find_vma, mt_find): 0x40,  # find_vma's call of mt_find (an unrecorded entry)
        (main, printk): 0x119,  # bpf_printk's bpf_trace_printk (notrace)
    }
    (name,) = _prog_ksyms(records)

    class Sites(_NoSites):
        def __call__(self, caller: str | None, start: int, callee: int, after: int = 0):
            ret = sites.get((start, callee))
            return None if ret is None else (caller, start, start + ret)

    target = parse_target("prog:name:lookup_vma")
    starts = {0: [(name, main), (None, callback)]}
    hits = build_hits(
        [target], [lambda f, a: f == name], {}, {}, records, site_of=Sites(), starts=starts
    )
    text = Trace(hits=hits).edges()
    assert len(hits) == 1 and "(unseen caller)" not in text, text
    calls = [(b.src.addr, b.dst.symbol) for b in hits[0].branches if b.kind == "call"]
    assert (callback + 0xF9, "bpf_probe_read_kernel") in calls, text
    assert (callback + 0x144, "bpf_probe_read_kernel_str") in calls, text
    # Nested in bpf_find_vma, which goes on after them: up_read is still its call.
    funcs = [b.dst.symbol for b in hits[0].branches if b.kind == "call"]
    assert (
        funcs.index("bpf_find_vma") < funcs.index("bpf_probe_read_kernel") < funcs.index("up_read")
    ), text
    assert "bpf_find_vma+0x1d5 -> up_read+0x0" in text, text
    assert text.count("-> bpf_find_vma+0x0") == 1, text
    # Without the callback among the program's functions, their caller stays unknown.
    alone = build_hits(
        [target], [lambda f, a: f == name], {}, {}, records, site_of=Sites(),
        starts={0: [(name, main)]},
    )  # fmt: skip
    assert "(unseen caller) -> bpf_probe_read_kernel+0x0" in Trace(hits=alone).edges()
