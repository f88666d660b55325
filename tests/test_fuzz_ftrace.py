"""Fuzzing the ftrace text parsers (`parse_trace`, `matching_functions`) with Hypothesis.

The trace text comes from the kernel (and whatever else writes to the instance),
globs from users: `parse_trace` returns records for the lines it understands and
skips the rest; `matching_functions` returns the names fnmatch would.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

import fnmatch
from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord, parse_trace
from pytest_lbr.kernel.functions import matching_functions
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


GOOD = (
    "           <...>-1234    [001] d..1.   123.456789: vfs_write+0x4/0x30 <ffffffff8123> "
    "<-ksys_write+0x5d/0xb0 <ffffffff8456>"
)
digits = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=25),
    st.text(alphabet="0123456789٣١", min_size=1, max_size=5),  # \d is Unicode-aware
)
hexs = st.text(alphabet="0123456789abcdef", min_size=1, max_size=20)
sym = st.tuples(st.text(max_size=8), hexs, hexs, hexs).map(lambda t: "{}+0x{}/0x{} <{}>".format(*t))
body = st.one_of(
    st.tuples(sym, sym).map(lambda t: f"{t[0]} <-{t[1]}"),
    st.tuples(sym, hexs).map(lambda t: f"{t[0]} <-0x{t[1]}"),
    st.text(max_size=40),
    st.sampled_from(["sys_getppid()", "sys_write(fd: 1)", "bpf_trace_printk: x", "e1: (0x1)"]),
)
record = st.tuples(
    st.text(max_size=12), digits, digits, st.text(min_size=4, max_size=5), digits, digits, body
).map(lambda t: "{} -{}  [{}] {} {}.{}: {}".format(*t))
trace_line = st.one_of(
    record,
    st.text(max_size=80),
    st.just(GOOD),
    st.just(GOOD).flatmap(lambda g: st.integers(0, len(g)).map(lambda n: g[:n])),  # cut short
)


@pytest.mark.slow
@fuzz_settings(800)
@given(st.lists(trace_line, max_size=10).map("\n".join))
@example(GOOD.replace("1234", "9" * 5000))  # regression: int() refused 5000 digits
@example(GOOD.replace("123.456789", "9" * 5000 + ".1"))
@example(GOOD.replace("1234", "١٢"))
def test_trace_text_parses_without_raising(text: str) -> None:
    RUNS["test_trace_text_parses_without_raising"] += 1
    records = parse_trace(text)
    for rec in records:
        assert isinstance(rec, FunctionRecord | EventRecord)
        assert rec.tid >= 0 and rec.cpu >= 0 and rec.ts_ns >= 0


def test_good_record_still_parses() -> None:
    (rec,) = parse_trace(GOOD)
    assert isinstance(rec, FunctionRecord)
    assert (rec.tid, rec.cpu, rec.ts_ns, rec.func, rec.parent) == (
        1234,
        1,
        123_456_789_000,
        "vfs_write",
        "ksys_write",
    )
    assert (rec.func_addr, rec.parent_addr, rec.in_irq) == (
        0xFFFFFFFF8123 - 4,
        0xFFFFFFFF8456,
        False,
    )


def test_overlong_numbers_skip_the_line() -> None:
    # Regression: a 5000-digit tid raised ValueError (int()'s digit limit).
    assert parse_trace(GOOD.replace("1234", "9" * 5000) + "\n" + GOOD)[0].tid == 1234


def test_overlong_line_parses_in_linear_time() -> None:
    # A megabyte line of near-records must not backtrack quadratically.
    assert parse_trace("-1 [1] " * 200_000) == []
    assert parse_trace("a-" * 500_000) == []


names = st.text(alphabet="abc_[]!-", min_size=1, max_size=8)
glob = st.text(alphabet="abc_*?[]!-^\\", min_size=1, max_size=10)


@fuzz_settings(1000)
@given(st.lists(names, max_size=15), glob, st.booleans())
@example(["a", "b"], "[b-a]", False)  # regression: reversed range raised re.error
@example([], "*", False)  # regression: "*" matched the empty last line
@example(["a\nb"], "a[!x]b", False)
@example(["a", "b"], "[!]", False)
@example(["]", "a"], "[]-a]", False)
@example(["-", "a"], "[a--]", False)
def test_globs_match_like_fnmatch(functions: list[str], pattern: str, module: bool) -> None:
    RUNS["test_globs_match_like_fnmatch"] += 1
    lines = [f"{f} [mod]" if module else f for f in functions]
    got = matching_functions("\n".join(lines) + "\n", pattern)
    want = [f for f in functions if "\n" not in f and fnmatch.fnmatchcase(f, pattern)]
    assert got == want


@fuzz_settings(1000)
@given(st.text(max_size=200), st.text(max_size=20), st.booleans())
@example("\n", "\n", False)  # regression: a newline in the glob matched across lines
def test_any_glob_on_any_text_is_a_list_of_names(text: str, pattern: str, modules: bool) -> None:
    RUNS["test_any_glob_on_any_text_is_a_list_of_names"] += 1
    got = matching_functions(text, pattern, modules=modules)
    assert all(isinstance(name, str) and "\n" not in name for name in got)
