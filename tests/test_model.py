"""Trace queries and the text format, on branches as both backends produce them."""

from __future__ import annotations

from pytest_lbr.model import Branch, Hit, InlineFrame, Location, Trace, format_branches


def loc(sym: str, off: int = 0, file: str | None = None, line: int | None = None) -> Location:
    return Location(addr=0xFFFFFFFF81000000 + off, symbol=sym, offset=off, file=file, line=line)


def call(a: str, b: str, off: int = 0x10) -> Branch:
    return Branch(loc(a, off), loc(b), "call")


def ret(a: str, b: str) -> Branch:
    return Branch(loc(a, 0x20), loc(b, 0x15), "ret")


def write_trace() -> Trace:
    hit = Hit(
        "kfunc:ksys_write",
        branches=[
            call("ksys_write", "vfs_write"),
            call("vfs_write", "write_null"),
            ret("write_null", "vfs_write"),
            ret("vfs_write", "ksys_write"),
        ],
    )
    return Trace(targets=["kfunc:ksys_write"], hits=[hit])


def test_called_with_and_without_caller() -> None:
    t = write_trace()
    assert t.called("write_null")
    assert t.called("write_null", by="vfs_write")
    assert not t.called("write_null", by="ksys_write")
    assert t.called("write_*", by="vfs_*")
    assert not t.called("tcp_v4_connect")


def test_functions_collapse_repeats_in_order() -> None:
    assert write_trace().functions() == [
        "ksys_write",
        "vfs_write",
        "write_null",
        "vfs_write",
        "ksys_write",
    ]


def test_has_path_is_an_ordered_subsequence_with_globs() -> None:
    t = write_trace()
    assert t.has_path("ksys_write", "write_null")
    assert t.has_path("ksys_*", "vfs_write", "write_*")
    assert not t.has_path("write_null", "tcp_v4_connect")
    m = t.closest_path("vfs_write", "tcp_v4_connect", "write_null")
    assert m.matched == ("vfs_write",) and m.missing == "tcp_v4_connect"


def test_callers_of_lists_who_called() -> None:
    assert write_trace().callers_of("write_null") == ["vfs_write"]


def test_branch_line_format_matches_bpflbr() -> None:
    b = Branch(
        loc("rethook_trampoline_handler", 0xAF, "kernel/trace/rethook.c", 331),
        loc("arch_rethook_fixup_return", 0, "arch/x86/kernel/rethook.c", 113),
        "call",
    )
    nxt = Branch(
        loc("arch_rethook_trampoline", 0x51),
        loc("__x64_sys_bpf", 0x1A, "kernel/bpf/syscall.c", 5530),
        "ret",
    )
    text = format_branches([b] * 31 + [nxt])
    first = text.splitlines()[0]
    assert first == (
        "[#31] rethook_trampoline_handler+0xaf (kernel/trace/rethook.c:331) -> "
        "arch_rethook_fixup_return+0x0 (arch/x86/kernel/rethook.c:113)"
    )
    assert (
        text.splitlines()[-1]
        == "arch_rethook_trampoline+0x51 -> __x64_sys_bpf+0x1a (kernel/bpf/syscall.c:5530)"
    )


def test_inlined_frames_are_continuation_lines() -> None:
    inner = Location(
        0x1000,
        "rethook_recycle",
        0x18,
        None,
        "arch/x86/include/asm/atomic.h",
        97,
        inlined=(InlineFrame("freelist_add", "include/linux/freelist.h", 70),),
    )
    text = format_branches([Branch(inner, loc("rethook_recycle", 0x29), "jmp")])
    assert text.splitlines()[1] == "    . inlined freelist_add (include/linux/freelist.h:70)"


def test_unknown_symbol_prints_the_address() -> None:
    assert str(Location(0xFFFFFFFFC0001234)) == "0xffffffffc0001234"


def test_str_trace_has_a_header_per_hit() -> None:
    t = write_trace()
    t.hits[0].retval = 1
    text = str(t)
    assert "hits=1 lost=0" in text.splitlines()[0]
    assert "Hit at kfunc:ksys_write:" in text and "retval=1" in text


def test_reprs_are_compact_for_failure_messages() -> None:
    b = call("vfs_write", "write_null")
    assert repr(b) == "<Branch call: vfs_write+0x10 -> write_null+0x0>"
    assert repr(b.dst) == "<Location write_null+0x0>"
