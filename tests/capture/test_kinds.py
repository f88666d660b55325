"""The kinds of target (capture/kinds/): each parsed target's kind module and what it says."""

from __future__ import annotations

import pytest

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.text import EventRecord
from pytest_lbr.capture.kinds import KINDS, kind_of
from pytest_lbr.capture.kinds.kfunc import glob_matcher
from pytest_lbr.capture.kinds.protocol import GraphArming, TargetKind
from pytest_lbr.targets import Target, parse_target

SPECS = [
    "prog:1",
    "kfunc:vfs_write",
    "kfunc:vfs_*",
    "tp:syscalls/sys_enter_getppid",
    "uprobe:/bin/true:main",
    "uretprobe:/bin/true:main",
]


@pytest.mark.parametrize("spec", SPECS)
def test_every_kind_the_parser_makes_has_its_module(spec: str) -> None:
    target = parse_target(spec)
    kind = kind_of(target)
    assert target.kind in kind.names and KINDS[target.kind] is kind
    assert type(kind) is not TargetKind


def test_each_kind_is_named_once() -> None:
    assert sorted(KINDS) == ["kfunc", "prog", "tp", "uprobe", "uretprobe"]
    assert {k: type(v).__name__ for k, v in KINDS.items()} == {
        "prog": "Program",
        "kfunc": "KernelFunction",
        "tp": "Tracepoint",
        "uprobe": "UserProbe",
        "uretprobe": "UserProbe",
    }


@pytest.mark.parametrize(
    ("spec", "ret", "fallback", "programs"),
    [
        ("prog:1", True, "kprobe", []),
        ("kfunc:vfs_write", True, "kprobe", []),
        ("kfunc:vfs_*", False, "kprobe", [(False, "lbr_kprobe_multi"), (False, "lbr_kprobe")]),
        (
            "kfunc:vfs_*",
            True,
            "kprobe",
            [(False, "lbr_kretprobe_multi"), (False, "lbr_kretprobe")],
        ),
        ("kfunc:vfs_*", True, "fentry", [(False, "lbr_kretprobe_multi")]),
        ("tp:syscalls/sys_enter_getppid", True, "kprobe", [(False, "lbr_tracepoint")]),
        ("uprobe:/bin/true:main", True, "kprobe", [(True, "lbr_uprobe")]),
        ("uretprobe:/bin/true:main", False, "kprobe", [(True, "lbr_uretprobe")]),
    ],
)
def test_the_shared_programs_a_kind_hooks_with(
    spec: str, ret: bool, fallback: str, programs: list[tuple[bool, str]]
) -> None:
    target = parse_target(spec)
    assert kind_of(target).shared_programs(target, ret=ret, fallback=fallback) == programs


def test_the_symbol_each_kinds_hook_traced() -> None:
    ksym = "bpf_prog_0123456789abcdef_xdp_pass"
    assert kind_of(parse_target("prog:1")).traced_symbol("xdp_pass", ksym) == ksym
    assert kind_of(parse_target("prog:1")).traced_symbol("xdp_pass", "") is None
    assert kind_of(parse_target("kfunc:vfs_*")).traced_symbol("vfs_read", "") == "vfs_read"
    for spec in SPECS[3:]:
        assert kind_of(parse_target(spec)).traced_symbol("main", "") is None


def test_what_the_graph_backend_asks_of_a_kind() -> None:
    by_events = {s for s in SPECS if kind_of(parse_target(s)).by_events}
    narrows = {s for s in SPECS if kind_of(parse_target(s)).narrows}
    assert by_events == set(SPECS[3:])
    assert narrows == set(SPECS[:3])
    assert [s for s in SPECS if kind_of(parse_target(s)).ends_at_return_event] == SPECS[1:3]


def test_a_hit_is_made_by_its_kinds_event() -> None:
    tp = kind_of(parse_target("tp:syscalls/sys_enter_getppid"))
    # Syscall events print "sys_NAME(args)", not their event's name.
    assert tp.hit_event("sys_enter_getppid", EventRecord(1, 0, 5, "sys_enter", "sys_getppid()"))
    assert not tp.hit_event("sys_enter_getppid", EventRecord(1, 0, 5, "sys_enter", "sys_read(0)"))
    user = kind_of(parse_target("uprobe:/bin/true:main"))
    assert user.hit_event("p_true_0x1139", EventRecord(1, 0, 5, "p_true_0x1139", "(0x1139)"))
    assert not user.hit_event("p_true_0x1139", EventRecord(1, 0, 5, "sys_enter", "(0x1139)"))
    assert not kind_of(parse_target("kfunc:vfs_write")).hit_event(
        "r_vfs_write", EventRecord(1, 0, 5, "r_vfs_write", "ret=0x1")
    )


def test_a_kind_no_module_handles_is_refused_by_both_backends() -> None:
    odd = Target("odd", "odd:thing")
    kind = kind_of(odd)
    with pytest.raises(CaptureError, match="unknown target kind 'odd'"):
        kind.attach(None, 0, odd)  # type: ignore[arg-type]
    with pytest.raises(CaptureError, match="not supported on the graph backend"):
        kind.arm_graph(GraphArming(None), 0, odd)  # type: ignore[arg-type]


def test_a_glob_matches_by_name_and_one_function_exactly() -> None:
    assert glob_matcher("vfs_*")("vfs_read", 0) and not glob_matcher("vfs_*")("ksys_read", 0)
    assert glob_matcher("vfs_read")("vfs_read", 0) and not glob_matcher("vfs_read")("vfs_r", 0)
