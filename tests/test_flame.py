"""Flame graphs: folded stacks from a graph-backend-shaped trace, and the SVG's frames."""

from __future__ import annotations

import re

from pytest_lbr.flame import FLAME_WIDTH, flame_svg, folded_lines, folded_stacks
from pytest_lbr.report import _trace_json
from tests.test_report import write_trace


def test_each_call_is_one_sample_of_its_stack() -> None:
    hits = _trace_json(write_trace())["hits"]
    counts = folded_stacks(hits + hits)  # two runs of the same path add up
    top = "kfunc:vfs_write;ksys_write;vfs_write"
    assert counts == {
        top: 2,
        f"{top};rw_verify_area": 2,
        f"{top};rw_verify_area;security_file_permission": 2,
        f"{top};write_null": 2,
        f"{top};fsnotify_modify": 2,
    }
    lines = folded_lines(counts).splitlines()
    assert lines[0] == f"{top} 2" and len(lines) == 5
    assert all(re.fullmatch(r"[^ ]+ \d+", line) for line in lines)


def test_separators_in_names_do_not_split_frames() -> None:
    hit = {
        "target": "prog:name:xdp count",
        "branches": [["call", "a;b", "", "", "c d", "", ""]],
    }
    assert folded_stacks([hit]) == {"prog:name:xdp_count;a:b;c_d": 1}


def test_frame_widths_are_calls_at_or_under_them() -> None:
    svg = flame_svg(folded_stacks(_trace_json(write_trace())["hits"]))
    frames = dict(
        re.findall(
            r"<title>([^:<]+): \d+ calls[^<]*</title><rect x=\"[\d.]+\" y=\"\d+\" width=\"([\d.]+)\"",
            svg,
        )
    )
    # 5 calls in all: vfs_write has all 5 under it, rw_verify_area 2, write_null 1.
    assert float(frames["vfs_write"]) == FLAME_WIDTH - 0.5
    assert abs(float(frames["rw_verify_area"]) - (FLAME_WIDTH * 2 / 5 - 0.5)) < 0.1
    assert abs(float(frames["write_null"]) - (FLAME_WIDTH / 5 - 0.5)) < 0.1
    assert "<script" not in svg and "http" not in svg.replace("http://www.w3.org/2000/svg", "")


def test_nothing_traced_draws_nothing() -> None:
    assert flame_svg({}) == ""
