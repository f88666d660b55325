"""A trace as call trees (`str(trace)`, `pytest_lbr.model.text`): indentation, helper
names, call lines, folding, the depth limit, LBR windows that start inside calls, and
the excerpt a failure message shows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lbr.model import UNSEEN_CALLER, Branch, HelperCall, Hit, Location, ProgramCalls, Trace
from pytest_lbr.model.text import call_tree, lines_around, tree_lines

PROG = ProgramCalls(
    "xdp_filter",
    9,
    ("xdp_filter", "account"),
    (HelperCall("bpf_map_lookup_elem", "call", "__htab_map_lookup_elem"),),
)


def bpf(sym: str, off: int, line: int) -> Location:
    return Location(
        0xFFFFFFFFC0048000 + off, sym, off, "bpf", "xdp_filter.bpf.c", line, program=PROG
    )


def kernel(sym: str, off: int = 0, helper: str | None = None) -> Location:
    return Location(0xFFFFFFFF81000000 + off, sym, off, helper=helper)


def calls(caller: Location, callee: Location, inner: list[Branch] | None = None) -> list[Branch]:
    """A recorded call of `callee` from `caller`, the calls it made, its return."""
    return [Branch(caller, callee, "call"), *(inner or []), Branch(callee, caller, "ret")]


def lookup(site: Location) -> list[Branch]:
    htab = kernel("__htab_map_lookup_elem")
    return calls(site, htab, calls(kernel("__htab_map_lookup_elem", 0x30), kernel("jhash")))


def xdp_hit() -> Hit:
    branches = [
        *lookup(bpf("xdp_filter", 0x40, 58)),
        *lookup(bpf("xdp_filter", 0x40, 58)),
        *lookup(bpf("xdp_filter", 0x40, 58)),
        *calls(bpf("account", 0x10, 80), kernel("bpf_ktime_get_ns")),
    ]
    return Hit("prog:name:xdp_filter", retval=2, branches=branches)


def tree(hit: Hit, **kw: int) -> list[str]:
    return [ln.text for ln in tree_lines(hit, **kw)]


def test_calls_indent_under_their_caller_with_helper_names_lines_and_folds() -> None:
    assert tree(xdp_hit()) == [
        "xdp_filter = 2",
        "  bpf_map_lookup_elem \u2192 __htab_map_lookup_elem \u00d73 (xdp_filter.bpf.c:58)",
        "    jhash",
        "  account (entry not recorded)",
        "    bpf_ktime_get_ns                         (xdp_filter.bpf.c:80)",
    ]


def test_returns_are_no_lines_of_their_own() -> None:
    text = str(Trace(hits=[xdp_hit()]))
    assert " -> " not in text and "+0x" not in text
    assert "jhash+0x0 -> __htab_map_lookup_elem+0x30" in Trace(hits=[xdp_hit()]).edges()


def test_the_depth_limit_counts_what_it_hides() -> None:
    assert tree(xdp_hit(), depth=1) == [
        "xdp_filter = 2",
        "  \u2026 8 call(s) below, deeper than 1",
    ]
    # Folded calls count each time they ran: 3 lookups with a jhash each; account, its call.
    assert call_tree(xdp_hit()).calls_below() == 8


def test_an_lbr_window_that_starts_inside_calls_names_the_frames_returned_into() -> None:
    # Records begin inside jhash (called before the window) and return twice.
    start = kernel("jhash", 0x20)
    branches = [
        Branch(start, kernel("jhash", 0x40), "cond"),
        Branch(kernel("jhash", 0x50), kernel("__htab_map_lookup_elem", 0x30), "ret"),
        Branch(kernel("__htab_map_lookup_elem", 0x40), bpf("xdp_filter", 0x48, 58), "ret"),
        *calls(bpf("xdp_filter", 0x60, 61), kernel("bpf_xdp_adjust_head")),
    ]
    assert tree(Hit("prog:name:xdp_filter", branches=branches)) == [
        "xdp_filter (called before the records begin)",
        "  __htab_map_lookup_elem (called before the records begin)",
        "    jhash",
        "  bpf_xdp_adjust_head                        (xdp_filter.bpf.c:61)",
    ]


def test_a_tail_call_and_an_unseen_entry_say_how_they_were_entered() -> None:
    stage2 = ProgramCalls("stage2", 6, ("stage2",), (), tail_called_by=("entry",))
    entry = Location(0xFFFFFFFFC0049000, "stage2", 0, "bpf", program=stage2)
    branches = [
        Branch(UNSEEN_CALLER, entry, "unseen"),
        Branch(entry, UNSEEN_CALLER, "ret"),
        Branch(UNSEEN_CALLER, kernel("memcpy_orig"), "unseen"),
    ]
    assert tree(Hit("prog:name:entry", branches=branches)) == [
        "prog:name:entry",
        "  stage2 (tail call from entry)",
        "  memcpy_orig (caller not recorded)",
    ]


def test_the_excerpt_keeps_the_path_to_the_wanted_call_within_the_limit() -> None:
    filler = [b for i in range(60) for b in calls(kernel("outer", 8), kernel(f"f{i}"))]
    wanted = calls(kernel("outer", 8), kernel("mid"), calls(kernel("mid", 4), kernel("target")))
    hit = Hit("kfunc:outer", branches=[*filler, *wanted, *filler[:20]])
    lines = tree_lines(hit)
    shown = list(lines_around(lines, lambda f: f.function == "target", 12))
    assert len(shown) <= 12
    assert shown[0] == "outer"
    assert "    target" in shown and "  mid" in shown
    assert any(s.strip().startswith("\u2026") for s in shown)
    # Nothing wanted: the head, and how much more there is.
    head = list(lines_around(lines, lambda f: False, 12))
    assert head[:2] == ["outer", "  f0"] and head[-1] == "\u2026 62 more line(s)"


# -- any records at all ---------------------------------------------------------------

_SYMS = st.sampled_from(["a", "b", "c", None])
_KINDS = st.sampled_from(["call", "ret", "jmp", "cond", "ind_call", "unseen", "implied", "syscall"])


@st.composite
def _branches(draw: st.DrawFn) -> list[Branch]:
    out = []
    for kind, s, d, off in draw(
        st.lists(st.tuples(_KINDS, _SYMS, _SYMS, st.integers(0, 3)), max_size=40)
    ):
        src = UNSEEN_CALLER if kind == "unseen" else kernel(s or "?", off) if s else Location(off)
        out.append(Branch(src, kernel(d, 0) if d else Location(0x10), kind))
    return out


@given(_branches(), st.integers(1, 6), st.integers(3, 12))
@settings(max_examples=300, deadline=None)
def test_any_records_draw_a_tree_within_its_limits(
    branches: list[Branch], depth: int, limit: int
) -> None:
    """Records in any order (an LBR window starts and ends anywhere) draw a tree: no
    line deeper than the limit, and an excerpt no longer than asked."""
    hit = Hit("kfunc:a", branches=branches)
    lines = tree_lines(hit, depth=depth)
    assert lines and all(ln.depth <= depth for ln in lines)
    shown = list(lines_around(lines, lambda f: f.function == "b", limit))
    assert len(shown) <= limit
    str(Trace(hits=[hit]))
