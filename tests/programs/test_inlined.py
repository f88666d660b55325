"""Inlined calls from the object's DWARF: examples/xdp_filter inlines `count()` and
`csum_fold()` (`__always_inline`) at five call sites; each is found at the line
that calls it, its range inside `xdp_filter`'s code. Pure (the built object)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_lbr.programs.btf_ext import object_lines
from pytest_lbr.programs.inlined import inlined_calls
from tests.bpf.objects import bpf_object

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "xdp_filter"


def test_every_inlined_call_is_at_the_line_that_calls_it() -> None:
    obj = EXAMPLE / "build" / "xdp_filter.bpf.o"
    if not obj.exists():
        pytest.skip("examples are not built (bash ci/setup builds them)")
    source = (EXAMPLE / "xdp_filter.bpf.c").read_text().splitlines()
    callers = {
        n for n, text in enumerate(source, 1) if re.search(r"\b(count|csum_fold)\(", text)
    } - {n for n, text in enumerate(source, 1) if "static __always_inline" in text}
    calls = inlined_calls(obj)
    assert {c.line for c in calls} == callers
    assert all(Path(c.file).name == "xdp_filter.bpf.c" for c in calls)
    main = object_lines(obj).function("xdp_filter", "xdp")
    assert main is not None
    for c in calls:
        assert c.function == "xdp_filter"
        assert main.insn <= c.start < c.end <= main.insn + main.count


def test_an_object_without_inlining_has_none() -> None:
    assert inlined_calls(bpf_object("many_arms")) == ()
