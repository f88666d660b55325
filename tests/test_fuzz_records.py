"""Fuzzing the LBR tracer's ring buffer records (`decode_record`) with Hypothesis.

A record is bytes from the kernel: whatever they hold (any length, any
`nr_entries`), decoding gives a RawHit with at most `max_entries` branches or
raises CaptureError with one line, nothing else. A record that is not exactly
one `struct lbr_hit` is refused, never padded.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

import ctypes
from collections import Counter
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.records import RawHit, decode_record, hit_record_type
from pytest_lbr.capture.hooks.tracer_object import TracerLayout, tracer_layout
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


def real_layout() -> TracerLayout:
    try:
        return tracer_layout()
    except Exception as exc:  # no tracer object or libbpf here: the layout is in the test
        print(f"fuzz: using a built-in tracer layout ({exc})")
        return TracerLayout({"LBR_RECORD_HIT": 1, "LBR_HIT_HAS_RETVAL": 1}, 832, 32)


LAYOUT = real_layout()


def record(layout: TracerLayout, nr_entries: int, record_type: int, tail: bytes) -> bytes:
    """A whole record of `layout` with the given header fields, then arbitrary bytes
    (cut or zero-filled to the record's size)."""
    rec: Any = hit_record_type(layout.max_entries)(
        type=record_type, nr_entries=nr_entries, flags=0xFFFFFFFF, retval=-1
    )
    head = bytes(rec)[: type(rec).nr_entries.offset + 8]
    size = ctypes.sizeof(rec)
    return (head + tail)[:size].ljust(size, b"\0")


def check(data: bytes, layout: TracerLayout) -> None:
    whole = len(data) == ctypes.sizeof(hit_record_type(layout.max_entries))
    try:
        hit = decode_record(data, layout)
    except CaptureError as exc:
        assert "\n" not in str(exc)
        assert not whole or "unknown record type" in str(exc), exc
        return
    assert whole, f"a {len(data)}-byte record decoded"
    assert isinstance(hit, RawHit)
    assert len(hit.entries) <= layout.max_entries
    assert all(0 <= v < 1 << 64 for e in hit.entries for v in e)


@fuzz_settings(1500)
@given(st.binary(max_size=2 * LAYOUT.hit_size))
@example(b"")
@example(b"\x01")
@example(b"\x01" + b"\xff" * (4 * LAYOUT.hit_size))
def test_random_bytes_decode_or_are_one_line_error(data: bytes) -> None:
    RUNS["test_random_bytes_decode_or_are_one_line_error"] += 1
    check(data, LAYOUT)


@fuzz_settings(1000)
@given(
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=0, max_value=(1 << 32) - 1),
    st.sampled_from([0, 1, 2, 0xFFFFFFFF]),
    st.binary(max_size=2100),
)
@example(32, 0xFFFFFFFF, 1, b"")
@example(1, 33, 1, b"\xff" * 24)
def test_any_nr_entries_decodes_to_at_most_max_entries(
    max_entries: int, nr_entries: int, record_type: int, tail: bytes
) -> None:
    RUNS["test_any_nr_entries_decodes_to_at_most_max_entries"] += 1
    layout = TracerLayout(
        LAYOUT.constants, ctypes.sizeof(hit_record_type(max_entries)), max_entries
    )
    check(record(layout, nr_entries, record_type, tail), layout)


@fuzz_settings(300)
@given(st.integers(min_value=1, max_value=LAYOUT.hit_size), st.binary(max_size=64))
@example(1, b"")
@example(LAYOUT.hit_size, b"")
@example(24, b"")  # the last branch entry cut off
def test_a_short_or_long_record_is_refused(cut: int, extra: bytes) -> None:
    """Regression: a short record was zero-filled into a hit with retval 0 and
    fewer branches than the kernel recorded."""
    RUNS["test_a_short_or_long_record_is_refused"] += 1
    whole = record(LAYOUT, LAYOUT.max_entries, LAYOUT.constants["LBR_RECORD_HIT"], b"\x11" * 2000)
    assert decode_record(whole, LAYOUT).retval is not None  # the whole record decodes
    for data in (whole[:-cut], whole + bytes([cut & 0xFF]) + extra):
        try:
            decode_record(data, LAYOUT)
        except CaptureError as exc:
            assert str(exc) == (
                f"LBR tracer sent a {len(data)}-byte record; struct lbr_hit is "
                f"{len(whole)} bytes (the tracer object and this pytest-lbr disagree: "
                f"reinstall pytest-lbr)"
            )
        else:
            raise AssertionError(f"a {len(data)}-byte record decoded")
