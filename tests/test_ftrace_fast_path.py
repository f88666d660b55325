"""`parse_trace`'s one pass over the text reads every line as the line-by-line way does.

The fast path (one regex over the whole text, function-record bodies parsed once
and cached across calls) must give exactly the records of the general path
(`_parse_lines`, the parser as it was line by line): on the real traces in
tests/data, and on those lines mutated with what could make the two differ
(other whitespace and line breaks, non-ASCII, "#", "+" in names, "-" in comms).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.capture.graph import text as graph_text
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord, parse_trace
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)

DATA = Path(__file__).parent / "data"
TRACES = sorted(DATA.glob("ftrace-*.txt"))
LINES = [line for p in TRACES for line in p.read_text().splitlines()]
TRICKY = [
    *" \t\r\n\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000é",
    *"#-+:.[]()<>0123456789abcdefx/_",
    "<-",
    "+0x",
    "/0x",
    "[unknown/kretprobe'd]",
]


def line_by_line(text: str) -> list[FunctionRecord | EventRecord]:
    out: list[FunctionRecord | EventRecord] = []
    graph_text._parse_lines(text, out, {})
    return out


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_real_traces_parse_as_line_by_line(path: Path) -> None:
    text = path.read_text()
    want = line_by_line(text)
    assert len(want) > 10
    graph_text._bodies.clear()
    assert parse_trace(text) == want  # cold cache
    assert parse_trace(text) == want  # warm


def test_a_full_body_cache_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_text, "BODY_CACHE_SIZE", 3)
    text = (DATA / "ftrace-6.12-xdp_helpers.txt").read_text()
    assert parse_trace(text) == line_by_line(text)
    assert len(graph_text._bodies) <= 3


def _mutate(line: str, at: int, what: str, cut: int) -> str:
    at %= len(line) + 1
    return line[:at] + what + line[at + cut :]


mutated_line = st.builds(
    _mutate,
    st.sampled_from(LINES),
    st.integers(0, 200),
    st.sampled_from(TRICKY) | st.text(max_size=3),
    st.integers(0, 3),
)
trace_text = st.tuples(
    st.lists(st.sampled_from(LINES) | mutated_line, max_size=12),
    st.sampled_from(["\n", "\r\n", "\n\n"]),
).map(lambda t: t[1].join(t[0]))


@pytest.mark.slow
@fuzz_settings(1500)
@given(trace_text)
@example(  # a tab where ftrace prints spaces: the line-by-line way takes "a" as the comm
    "a-1\t[0] .... 1.2: x-3 [0] .... 1.2: f+0x0/0x1 <1> <-g+0x0/0x1 <2>"
)
@example("# x-1 [000] ..... 1.000001: f+0x0/0x1 <1> <-g+0x0/0x1 <2>")  # a comment
@example("x-1 [000] ..... 1.1234567890123: f+0x0/0x1 <1> <-g+0x0/0x1 <2>")  # 13 digits
@example("x-1 [000] ..... 1.5: f+g+0x0/0x1 <1> <-h+0x0/0x1 <2>")  # "+" in a name
@example("x-1 [000] ..... 1.5: f+0x0/0x1 <1> <-h+0x0/0x1 <2>\x85y-2 [0] .... 2.0: e0: z")
def test_mutated_traces_parse_as_line_by_line(text: str) -> None:
    RUNS["test_mutated_traces_parse_as_line_by_line"] += 1
    assert parse_trace(text) == line_by_line(text)


BODIES = [line.split(": ", 1)[1] for line in LINES if ": " in line and not line.startswith("#")]
mutated_body = st.builds(
    _mutate,
    st.sampled_from(BODIES),
    st.integers(0, 120),
    st.sampled_from(TRICKY) | st.text(max_size=3),
    st.integers(0, 3),
)


@fuzz_settings(1500)
@given(st.sampled_from(BODIES) | mutated_body)
@example("f+g+0x0/0x1 <1> <-h+0x0/0x1 <2>")
@example("f+0x0/0x1  <1>\t<-h+0x0/0x1 <2>")
def test_the_quick_body_pattern_reads_as_the_general_one(body: str) -> None:
    RUNS["test_the_quick_body_pattern_reads_as_the_general_one"] += 1
    assert graph_text._read_body(body) == graph_text._read_any_body(body)
