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


def test_the_kernels_code_of_a_loaded_program_knows_its_inlined_calls() -> None:
    """The traced modes read a program's code from the kernel (translated
    instructions): a program the `bpf` harness loaded has its object's inlined calls
    there too, on the kernel's records of the same rank as the object's."""
    from pytest_lbr.bpf import BpfLoader
    from pytest_lbr.coverage.program import read_code
    from tests.bpf.objects import require_root

    obj = EXAMPLE / "build" / "xdp_filter.bpf.o"
    if not obj.exists():
        pytest.skip("examples are not built (bash ci/setup builds them)")
    require_root()
    want = {c.line for c in inlined_calls(obj)}
    with BpfLoader() as loader:
        prog = loader.load(obj).programs["xdp_filter"]
        code = read_code(prog.fd, "x86_64", loader.written)
    assert {ln for _, _, _, ln in code.inlined} == want
    assert {(f, ln) for _, _, f, ln in code.inlined} <= code.lines
    main = code.functions[0]
    end = code.functions[1].insn if len(code.functions) > 1 else len(code.xlated) // 8
    assert all(main.insn <= a < b <= end for a, b, _, _ in code.inlined)
    # Each copy's code is the callee's: its lines, where known, are count()'s or
    # csum_fold()'s, never the caller's own.
    source = (EXAMPLE / "xdp_filter.bpf.c").read_text().splitlines()
    callee = {
        n
        for n, t in enumerate(source, 1)
        if n > 1
        and any(f in "".join(source[max(0, n - 9) : n]) for f in ("void count(", "csum_fold(__u32"))
    }
    for a, b, _, line in code.inlined:
        held = {ln for i in range(a, b) if (at := code.line_at(i)) is not None for ln in [at[1]]}
        assert line not in held and held <= callee, (line, held)
