"""Golden files without pytest around them: normalisation, format, paths, atomic writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_lbr import golden as g
from pytest_lbr.golden.storage import unused_files
from pytest_lbr.model import Branch, Hit, Location, Trace


def loc(sym: str, off: int = 0) -> Location:
    return Location(0xFFFFFFFFC0000000 + off, sym, off, file="kernel/x.c", line=off)


def call(a: str, b: str, off: int = 0) -> Branch:
    return Branch(loc(a, off), loc(b), "call")


def ret(a: str, b: str, off: int = 0) -> Branch:
    return Branch(loc(a, 0), loc(b, off), "ret")


def trace(*branches: Branch, target: str = "kfunc:vfs_write") -> Trace:
    return Trace(
        [target], "graph", [Hit(target, branches=list(branches))], kernel_release="6.1.0-56-amd64"
    )


def test_interrupt_subtree_is_dropped_with_everything_it_called() -> None:
    t = trace(
        call("vfs_write", "write_null"),
        call("write_null", "__sysvec_apic_timer_interrupt"),
        call("__sysvec_apic_timer_interrupt", "update_wall_time"),  # not itself in the list
        ret("update_wall_time", "__sysvec_apic_timer_interrupt"),
        ret("__sysvec_apic_timer_interrupt", "write_null"),
        call("write_null", "do_something"),
        ret("do_something", "write_null"),
        ret("write_null", "vfs_write"),
    )
    assert g.normalize(t) == [
        "hit kfunc:vfs_write",
        "vfs_write -> write_null",
        "write_null -> do_something",
    ]
    kept = g.normalize(t, norm=g.Normalization(keep=("__sysvec_*",)))
    assert "__sysvec_apic_timer_interrupt -> update_wall_time" in kept


def _switched_out(edges: list[Branch], recorded: list[Branch]) -> tuple[list[str], list[str]]:
    """The golden lines of `edges` (a slab allocation whose second edge enters
    __cond_resched), and of the same with `recorded` (what the function tracer kept
    of the task being switched out there) after that edge."""
    switched = trace(*edges[:2], *recorded, *edges[2:])
    return g.normalize(trace(*edges)), g.normalize(switched)


def test_preemption_at_cond_resched_leaves_no_trace() -> None:
    # The shape of a real 6.1 connect trace that went through the scheduler in CI:
    # __schedule is notrace, so its calls appear with it as the caller, and the
    # nested calls of pick_next_task_fair have callers that were never recorded.
    edges = [
        call("__alloc_skb", "kmem_cache_alloc_node"),
        call("kmem_cache_alloc_node", "__cond_resched"),
        ret("__cond_resched", "kmem_cache_alloc_node"),
        call("kmem_cache_alloc_node", "should_failslab"),
        ret("should_failslab", "kmem_cache_alloc_node"),
        ret("kmem_cache_alloc_node", "__alloc_skb"),
    ]
    quiet, preempted = _switched_out(
        edges,
        [
            call("__schedule", "_raw_spin_lock"),
            ret("_raw_spin_lock", "__schedule"),
            call("__schedule", "pick_next_task_fair"),
            call("pick_next_task_fair", "put_prev_entity"),
            call("update_load_avg", "__update_load_avg_se"),
            ret("__update_load_avg_se", "update_load_avg"),
            ret("put_prev_entity", "pick_next_task_fair"),
            ret("pick_next_task_fair", "__schedule"),
            call("__schedule", "__traceiter_sched_switch"),
            call("trace_pid_list_is_set", "_raw_spin_lock_irqsave"),
            ret("_raw_spin_lock_irqsave", "trace_pid_list_is_set"),
            ret("__traceiter_sched_switch", "__schedule"),
            call("finish_task_switch.isra.0", "_raw_spin_unlock"),
            ret("_raw_spin_unlock", "finish_task_switch.isra.0"),
        ],
    )
    assert preempted == quiet
    assert "kmem_cache_alloc_node -> __cond_resched" in quiet


def test_the_pid_filter_run_at_a_switch_leaves_no_trace() -> None:
    # The shape of a real 6.12 connect trace in CI (examples/connect, 2026-11-27): the
    # task was switched out at a preemption point, and all the function tracer kept of
    # that is its own pid filter's lock calls, whose caller it never records.
    edges = [
        call("__alloc_skb", "kmem_cache_alloc_node_noprof"),
        call("kmem_cache_alloc_node_noprof", "__cond_resched"),
        ret("__cond_resched", "kmem_cache_alloc_node_noprof"),
        ret("kmem_cache_alloc_node_noprof", "__alloc_skb"),
        call("__alloc_skb", "kmalloc_reserve"),
        ret("kmalloc_reserve", "__alloc_skb"),
    ]
    quiet, switched = _switched_out(
        edges,
        [
            call("trace_pid_list_is_set", "_raw_spin_lock_irqsave"),
            ret("_raw_spin_lock_irqsave", "trace_pid_list_is_set"),
            call("trace_pid_list_is_set", "_raw_spin_unlock_irqrestore"),
            ret("_raw_spin_unlock_irqrestore", "trace_pid_list_is_set"),
        ],
    )
    assert switched == quiet


def test_allocator_slow_path_is_not_part_of_the_golden() -> None:
    fast = trace(call("skb_release_data", "kfree"), ret("kfree", "skb_release_data"))
    slow = trace(
        call("skb_release_data", "kfree"),
        ret("kfree", "skb_release_data"),
        # kfree tail-calls into the slow path: the caller shows as skb_release_data
        call("skb_release_data", "__slab_free"),
        call("__slab_free", "put_cpu_partial"),
        ret("put_cpu_partial", "__slab_free"),
        ret("__slab_free", "skb_release_data"),
    )
    assert g.normalize(slow) == g.normalize(fast)
    kept = g.normalize(slow, norm=g.Normalization(keep=("__slab_free", "put_cpu_partial")))
    assert "skb_release_data -> __slab_free" in kept


def test_without_returns_only_the_excluded_edges_go() -> None:
    # LBR with a call-only filter: no returns, so no subtree to skip.
    t = trace(call("a", "rcu_note_context_switch"), call("a", "b"), call("b", "c"))
    assert g.normalize(t) == ["hit kfunc:vfs_write", "a -> b", "b -> c"]


def test_repeats_fold_but_can_be_kept() -> None:
    t = trace(*[call("loop", x) for x in ("a", "b", "a", "b", "a", "b", "c", "c", "c")])
    assert g.normalize(t) == ["hit kfunc:vfs_write", "loop -> a", "loop -> b", "loop -> c"]
    assert len(g.normalize(t, norm=g.Normalization(collapse=False))) == 10


def test_program_ids_are_not_written() -> None:
    assert g.normalize(trace(call("a", "b"), target="prog:123"))[0] == "hit prog:<id>"
    assert g.normalize(trace(call("a", "b"), target="prog:name:xdp"))[0] == "hit prog:name:xdp"


def test_levels() -> None:
    t = trace(call("a", "b", 0x12), ret("b", "a", 0x17))
    assert g.normalize(t, "symbol")[1:] == ["call a+0x12 -> b+0x0", "ret b+0x0 -> a+0x17"]
    assert g.normalize(t, "line")[1:] == [
        "call a (kernel/x.c:18) -> b (kernel/x.c:0)",
        "ret b (kernel/x.c:0) -> a (kernel/x.c:23)",
    ]
    with pytest.raises(ValueError, match="unknown golden level 'insn'"):
        g.normalize(t, "insn")


def test_serialize_parse_round_trip() -> None:
    t = trace(call("a", "b"))
    lines = g.normalize(t)
    parsed = g.parse(g.serialize(t, lines, "function"))
    assert parsed.lines == lines
    assert parsed.header == {
        "format": "1",
        "kernel": "6.1.0-56-amd64",
        "arch": "x86_64",
        "backend": "graph",
        "level": "function",
    }


def test_header_without_fields_is_refused() -> None:
    with pytest.raises(g.GoldenError, match="x.lbr: header lacks kernel, arch"):
        g.parse(
            "# pytest-lbr golden trace\n# format: 1\n# backend: graph\n# level: function\n", "x.lbr"
        )


def test_comparison_reports_first_divergence() -> None:
    cmp = g.Comparison(["hit t", "a -> b"], ["hit t", "a -> b", "a -> c"], Path("t.lbr"))
    assert not cmp.matches
    assert cmp.first_divergence() == "first divergence at edge 3: unexpected 'a -> c'"
    assert "+a -> c" in cmp.diff()


def test_series_and_paths(tmp_path: Path) -> None:
    assert g.kernel_series("6.12.117+deb12-amd64") == "6.12"
    assert g.kernel_series("6.1.0-56-amd64") == "6.1"
    module = tmp_path / "tests" / "test_net.py"
    read, default = g.golden_path(module, "test_x[a/b]", "6.12.1")
    assert read == default == tmp_path / "tests/__lbr_golden__/test_net/test_x[a_b].lbr"
    variant = default.with_name("test_x[a_b]@6.12.lbr")
    g.write_atomic(variant, "x")
    assert g.golden_path(module, "test_x[a/b]", "6.12.1")[0] == variant
    assert g.golden_path(module, "test_x[a/b]", "6.1.0")[0] == default


def test_write_atomic_is_never_world_writable(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "a" / "b" / "t.lbr"
        g.write_atomic(path, "one\n")
        g.write_atomic(path, "two\n")
    finally:
        os.umask(old)
    assert path.read_text() == "two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert [p.name for p in path.parent.iterdir()] == ["t.lbr"]  # no temporary left behind


def test_write_atomic_tolerates_a_directory_made_concurrently(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two xdist workers may create __lbr_golden__/<module>/ at the same moment."""
    from pathlib import Path

    from pytest_lbr.golden import write_atomic

    target = tmp_path / "__lbr_golden__" / "test_mod" / "test_a.lbr"
    real_mkdir = Path.mkdir

    def racing_mkdir(self: Path, *args: object, **kwargs: object) -> None:
        real_mkdir(self)  # the other worker wins the race ...
        real_mkdir(self)  # ... so ours finds it existing

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    write_atomic(target, "x\n")
    assert target.read_text() == "x\n"


def test_one_file_name_rule_for_golden_files_and_reports() -> None:
    from pytest_lbr.golden.storage import safe_file_name

    assert safe_file_name("TestX.test_y[a/b:c]") == "TestX.test_y[a_b_c]"
    # `@` separates a test's name from a variant's kernel series: never part of a name.
    assert safe_file_name("test_x[v@6.12]") == "test_x[v_6.12]"
    assert safe_file_name("t[a,b=c+d-e]") == "t[a,b=c+d-e]"


def test_check_statuses(tmp_path: Path) -> None:
    """GoldenCheck without pytest: missing, written, unchanged, match, mismatch, lossy."""
    module = tmp_path / "test_mod.py"
    t = trace(call("vfs_write", "write_null"))
    check = g.GoldenCheck(module)
    missing = check.run(t, "test_a")
    assert (missing.status, missing.passed, missing.expected) == ("missing", False, ())
    assert missing.message.endswith(": run with --lbr-golden-update to record it")
    update = g.GoldenCheck(module, update=True)
    assert update.run(t, "test_a").status == "written"
    assert update.run(t, "test_a").status == "unchanged"
    match = check.run(t, "test_a")
    assert (match.status, match.passed, match.path) == ("match", True, missing.path)
    assert match.expected == match.actual == ("hit kfunc:vfs_write", "vfs_write -> write_null")
    other = check.run(trace(call("vfs_write", "write_zero")), "test_a")
    assert other.status == "mismatch"
    assert other.message.startswith("golden trace mismatch: ")
    assert "first divergence at edge 2" in other.message
    t.lost = 3
    lossy = check.run(t, "test_a")
    assert (lossy.status, lossy.actual) == ("error", ())
    assert lossy.message == "trace lost 3 records: a golden comparison would be unreliable"


def test_each_architecture_keeps_its_own_golden_files(tmp_path: Path) -> None:
    # The example suite in the arm64 guest: the x86-64 files there do not count.
    # The arm64 recording goes beside them (name@aarch64.lbr); each architecture
    # then compares with its own, and a series variant of either stays its own.
    module = tmp_path / "test_mod.py"
    x86 = trace(call("__x64_sys_write", "ksys_write"))
    x86.arch = "x86_64"
    arm = trace(call("__arm64_sys_write", "ksys_write"))
    arm.arch, arm.kernel_release = "aarch64", "6.1.0-50-arm64"
    assert g.GoldenCheck(module, update=True).run(x86, "test_a").status == "written"
    x86_file = g.golden_path(module, "test_a", "6.1.0")[1]
    missing = g.GoldenCheck(module).run(arm, "test_a")
    assert (missing.status, missing.path.name) == ("missing", "test_a@aarch64.lbr")
    assert (
        missing.message.startswith("no golden trace ") and "test_a@aarch64.lbr" in missing.message
    )
    written = g.GoldenCheck(module, update=True).run(arm, "test_a")
    assert (written.status, written.path.name) == ("written", "test_a@aarch64.lbr")
    assert g.GoldenCheck(module).run(arm, "test_a").status == "match"
    assert g.GoldenCheck(module).run(x86, "test_a").status == "match"
    assert "__x64_sys_write" in x86_file.read_text()  # never overwritten by arm64's
    # An x86-64 6.1 variant is not arm64's either.
    g.write_atomic(x86_file.with_name("test_a@6.1.lbr"), x86_file.read_text())
    assert g.GoldenCheck(module).run(arm, "test_a").path.name == "test_a@aarch64.lbr"
    # A file named for the architecture counts on it even with no other file beside it.
    (g.golden_path(module, "test_b", "6.1.0")[1]).with_name("test_b@aarch64.lbr").write_bytes(
        written.path.read_bytes()
    )
    assert g.GoldenCheck(module).run(arm, "test_b").status == "match"
    # Every variant belongs to the test: none is reported unused.
    assert unused_files(module, {"test_a", "test_b"}) == []


def test_binary_golden_file_is_a_one_line_error(tmp_path: Path) -> None:
    """A golden file that is not text (a bad merge, a binary put in its place) fails the
    check with one line naming it, not a UnicodeDecodeError."""
    module = tmp_path / "test_mod.py"
    t = trace(call("vfs_write", "write_null"))
    path = g.GoldenCheck(module, update=True).run(t, "test_a").path
    path.write_bytes(b"\xff\xfe\x00binary")
    bad = g.GoldenCheck(module).run(t, "test_a")
    assert (bad.status, bad.passed) == ("error", False)
    assert bad.message.startswith("unusable golden trace: "), bad.message
    assert "test_a.lbr: not UTF-8 text (byte 0)" in bad.message and "\n" not in bad.message
    # --lbr-golden-update replaces it.
    assert g.GoldenCheck(module, update=True).run(t, "test_a").status == "written"


def test_unused_files_and_usage(tmp_path: Path) -> None:
    from pytest_lbr.golden.storage import golden_dir, golden_name, unused_files
    from pytest_lbr.golden.unused import GoldenUsage

    module = tmp_path / "test_mod.py"
    folder = golden_dir(module)
    for name in ("test_a.lbr", "test_a@6.12.lbr", "test_b.lbr", ".test_a.lbr.x.tmp", "notes.txt"):
        g.write_atomic(folder / name, "x\n")
    assert golden_name(folder / "test_a@6.12.lbr") == golden_name(folder / "test_a.lbr") == "test_a"
    assert unused_files(module, {"test_a"}) == [folder / "test_b.lbr"]
    assert unused_files(tmp_path / "test_other.py", set()) == []

    usage = GoldenUsage()
    assert not usage
    usage.note(module, ["m::test_a", "m::test_c"], True, folder / "test_a.lbr")
    assert usage.unused({"m::test_a", "m::test_c"}) == [folder / "test_b.lbr"]
    assert usage.unused({"m::test_a"}) == []  # test_c did not pass: it may use test_b
    # An xdist worker that deselected a test of the module makes it incomplete.
    worker = GoldenUsage()
    worker.note(module, ["m::test_a", "m::test_c"], False, folder / "test_a.lbr")
    usage.merge(worker.to_json())
    assert usage.unused({"m::test_a", "m::test_c"}) == []
