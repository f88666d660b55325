"""Fuzzing target strings (`pytest_lbr.targets.parse_target(s)`) with Hypothesis.

Whatever a test passes to `lbr.trace(...)`, parsing gives a Target or raises
TargetError with one line, nothing else.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.targets import Target, TargetError, parse_target, parse_targets
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


class WithFd:
    """An object with a `.fd`, as libbpf and bcc programs are."""

    def __init__(self, fd: Any, name: Any) -> None:
        self.fd = fd
        self.name = name

    def __repr__(self) -> str:
        return f"WithFd({self.fd!r}, {self.name!r})"


KINDS = ["prog", "kfunc", "tp", "uprobe", "uretprobe", "kprobe", ""]
PROG = ["", "name:", "tag:", "pinned:", "fd:", "id:"]
text_target = st.one_of(
    st.text(),
    st.tuples(st.sampled_from(KINDS), st.text()).map(":".join),
    st.tuples(st.sampled_from(PROG), st.text()).map(lambda t: "prog:" + "".join(t)),
    # Digits of every script, and more of them than int() converts by default.
    st.text(alphabet="0123456789²³¹٣१〇", min_size=1).map(lambda s: f"prog:{s}"),
    st.text(alphabet="0123456789²٣", min_size=1),
)
any_target = st.one_of(
    text_target,
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(),
    st.binary(),
    st.builds(
        WithFd,
        st.one_of(st.integers(), st.none(), st.text()),
        st.one_of(st.text(), st.binary(), st.none()),
    ),
)


def check(target: Any) -> None:
    try:
        parsed = parse_target(target)
    except TargetError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(parsed, Target)
    assert parsed.kind in ("prog", "kfunc", "tp", "uprobe", "uretprobe")
    if parsed.kind == "prog":
        set_fields = [
            parsed.prog_fd,
            parsed.prog_id,
            parsed.prog_name,
            parsed.prog_tag,
            parsed.pin_path,
        ]
        assert sum(f is not None for f in set_fields) == 1
        assert parsed.prog_id is None or 0 < parsed.prog_id < 1 << 32


@fuzz_settings(2000)
@given(any_target)
@example("prog:²")  # str.isdigit() is True, int() refuses it
@example("²")
@example("9" * 5000)  # more digits than int() converts
@example("prog:" + "9" * 5000)
@example(1 << 32)  # the kernel's program ids are u32
@example("prog:4294967296")
@example(1 << 5000)  # str() refuses it
def test_target_parses_or_is_one_line_error(target: Any) -> None:
    RUNS["test_target_parses_or_is_one_line_error"] += 1
    check(target)


@fuzz_settings(500)
@given(st.lists(any_target, max_size=5))
def test_target_lists_parse_or_are_one_line_error(targets: list[Any]) -> None:
    RUNS["test_target_lists_parse_or_are_one_line_error"] += 1
    try:
        parsed = parse_targets(targets)
    except TargetError as exc:
        assert "\n" not in str(exc)
        return
    assert len(parsed) == len(targets) > 0


def test_unicode_and_overlong_digits_are_target_errors() -> None:
    # Regressions: these raised a bare ValueError from int().
    for bad in ("²", "prog:²", "9" * 5000, "prog:" + "9" * 5000):
        with pytest.raises(TargetError, match="bad target"):
            parse_target(bad)
    assert parse_target("prog:42").prog_id == 42


@fuzz_settings(300)
@given(st.integers(min_value=1 << 32, max_value=1 << 200), st.sampled_from(["", "prog:", "int"]))
def test_program_ids_past_u32_are_refused(value: int, form: str) -> None:
    """Regression: ids above 2**32 were accepted; the kernel's ids are u32."""
    RUNS["test_program_ids_past_u32_are_refused"] += 1
    with pytest.raises(TargetError, match=r"a BPF program id is an integer from 1 to 4294967295$"):
        parse_target(value if form == "int" else f"{form}{value}")
    low = value % (1 << 32) or 1
    assert parse_target(low).prog_id == low
