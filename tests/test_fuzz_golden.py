"""Fuzzing the golden file parser (`pytest_lbr.golden.format.parse`) with Hypothesis.

A golden file is edited by people and merged by git: whatever it holds, `parse`
returns a GoldenFile or raises GoldenError with one line, nothing else.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.golden.format import FORMAT_VERSION, GoldenError, GoldenFile, parse, serialize
from pytest_lbr.model import Trace
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


HEADER = [
    "# pytest-lbr golden trace",
    f"# format: {FORMAT_VERSION}",
    "# kernel: 6.12.0-1-amd64",
    "# arch: x86_64",
    "# backend: graph",
    "# level: function",
]

# Lines a golden file is made of, and what git and editors do to them.
line = st.one_of(
    st.sampled_from(HEADER),
    st.sampled_from(HEADER).map(lambda h: h[: len(h) // 2]),  # truncated header
    st.sampled_from(["<<<<<<< HEAD", "=======", ">>>>>>> feature", "||||||| base"]),
    st.sampled_from(["xdp_count -> bpf_map_lookup_elem", "hit xdp_count", "a -> b", "# "]),
    st.text(max_size=40),
    st.text(alphabet="#:-> hit\t\r\x0b\x0c\x1c\x85\u2028", max_size=20),
    st.sampled_from([5_000, 200_000, 2_000_000]).map(lambda n: "x" * n),  # huge line
)


def check(text: str) -> None:
    try:
        golden = parse(text, "g.lbr")
    except GoldenError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message
        assert message.startswith("g.lbr")
        assert len(message) < 1000  # a huge line is shown shortened
        return
    assert isinstance(golden, GoldenFile)
    assert golden.header["format"] == str(FORMAT_VERSION)
    assert all(row.startswith("hit ") or " -> " in row for row in golden.lines)


@pytest.mark.slow
@fuzz_settings(1000)
@given(st.lists(line, max_size=30).map("\n".join))
@example("\n".join([*HEADER, "<<<<<<< HEAD", "a -> b", "=======", "a -> c", ">>>>>>> x"]))
@example("\n".join([*HEADER, "x" * 3_000_000]))
@example("\n".join(HEADER[:3]) + "\n# ar")  # truncated mid-header
def test_golden_text_parses_or_is_one_line_error(text: str) -> None:
    RUNS["test_golden_text_parses_or_is_one_line_error"] += 1
    check(text)


@fuzz_settings(800)
@given(st.binary(max_size=2000), st.sampled_from(["utf-8", "latin-1"]))
@example(b"# pytest-lbr golden trace\n\xff\xfe\x00", "utf-8")
def test_golden_bytes_parse_or_are_one_line_error(data: bytes, encoding: str) -> None:
    """Binary junk, as text (any decoding) and as the raw bytes of the file."""
    RUNS["test_golden_bytes_parse_or_are_one_line_error"] += 1
    check(data.decode(encoding, errors="surrogateescape" if encoding == "utf-8" else "strict"))
    try:
        parse(data, "g.lbr")
    except GoldenError as exc:
        assert "\n" not in str(exc)


def test_undecodable_bytes_are_a_golden_error() -> None:
    # Regression: bytes that are not UTF-8 raised UnicodeDecodeError.
    with pytest.raises(GoldenError, match=r"^g.lbr: not UTF-8 text"):
        parse(b"# pytest-lbr golden trace\n\xff", "g.lbr")


def test_merge_conflict_markers_are_named() -> None:
    text = "\n".join([*HEADER, "<<<<<<< HEAD", "a -> b", "=======", "a -> c", ">>>>>>> x"])
    with pytest.raises(GoldenError, match=r"^g.lbr:7: unresolved merge conflict"):
        parse(text, "g.lbr")


name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789.+/", min_size=1, max_size=12)
edge = st.one_of(st.tuples(name, name).map(" -> ".join), name.map("hit {}".format))


@fuzz_settings(300)
@given(st.lists(edge, max_size=20), st.sampled_from(["function", "symbol", "line"]))
def test_serialized_golden_files_read_back(lines: list[str], level: str) -> None:
    """Valid files keep parsing the same way (the fixes did not change valid input)."""
    RUNS["test_serialized_golden_files_read_back"] += 1
    trace = Trace(backend="lbr", kernel_release="6.1.0-9-amd64")
    golden = parse(serialize(trace, lines, level))
    assert (golden.lines, golden.level, golden.backend) == (lines, level, "lbr")
    assert parse(serialize(trace, lines, level).encode()).lines == lines
