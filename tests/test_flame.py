"""Flame graphs: folded stacks from a graph-backend-shaped trace, and the SVG's frames."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_lbr.report.flame import FLAME_WIDTH, flame_svg, folded_lines, folded_stacks
from pytest_lbr.report.render import trace_json, write_html, write_test_files
from tests.test_report import CHROMIUM, record, screenshot, write_trace


def test_each_call_is_one_sample_of_its_stack() -> None:
    hits = trace_json(write_trace())["hits"]
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
    svg = flame_svg(folded_stacks(trace_json(write_trace())["hits"]))
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


def test_report_writes_folded_stacks_and_draws_the_flame_graph(tmp_path: Path) -> None:
    """In headless Chromium, offline: the page shows the flame graph's frames and logs
    no console error; the folded file is beside the trace text."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (ci/setup installs it)")
    text = write_test_files(tmp_path, record("tests/test_x.py::test_write", write_trace(), []))
    folded = text.with_suffix(".folded").read_text().splitlines()
    assert "kfunc:vfs_write;ksys_write;vfs_write;write_null 1" in folded
    html = (write_html(tmp_path) or tmp_path).read_text()  # type: ignore[union-attr]
    assert 'class="flame"' in html
    # Nothing to fetch: the only URL is the SVG namespace.
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) == {"http://www.w3.org/2000/svg"}
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--enable-logging=stderr",
                "--v=0",
                f"--user-data-dir={profile}",
                "--dump-dom",
                (tmp_path / "index.html").as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    # The browser parsed the frames: every function of the trace has one.
    dom = run.stdout
    for name in ("vfs_write", "rw_verify_area", "security_file_permission", "write_null"):
        assert re.search(rf"<title>{name}: \d+ calls", dom), name
    img = screenshot(html, tmp_path)
    # Warm frame colours (red > 200, blue < 60) fill a band under the first heading.
    warm = sum(1 for r, g, b in img.getdata() if r > 200 and b < 60 and g < 215)  # type: ignore[attr-defined]
    assert warm > 5 * 1000, f"flame graph frames not drawn ({warm} warm pixels)"
