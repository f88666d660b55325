"""The HTML report, looked at the way a person does: rendered by headless Chromium.

The page is built from a trace shaped like the graph backend's (call/ret records of
write(2) to /dev/null); the screenshot must show the call-tree diagram: node boxes in
their colours where the diagram is, not a blank or broken page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_lbr.golden import GoldenResult
from pytest_lbr.model import Branch, Hit, Location, Trace
from pytest_lbr.report.record import TestRecord
from pytest_lbr.report.render import (
    call_tree,
    render_html,
    trace_json,
    write_html,
    write_test_files,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NODE_BLUE = (0xCF, 0xE3, 0xFF)  # svg.tree rect.fn fill
ROOT_BLUE = (0x2B, 0x4F, 0x8C)  # svg.tree rect.root fill
NEW_RED = (0xFF, 0xD3, 0xCC)  # rect.new: a call the golden trace does not have


def loc(sym: str, off: int = 0, line: int = 1) -> Location:
    return Location(0xFFFFFFFF81000000 + off, sym, off, file="fs/read_write.c", line=line)


def write_trace(callee: str = "write_null") -> Trace:
    """ksys_write -> vfs_write -> {rw_verify_area -> security_file_permission, callee}."""
    b = [
        Branch(loc("ksys_write", 0x40, 640), loc("vfs_write", 0, 580), "call"),
        Branch(loc("vfs_write", 0x2A, 590), loc("rw_verify_area", 0, 450), "call"),
        Branch(loc("rw_verify_area", 0x33, 470), loc("security_file_permission"), "call"),
        Branch(loc("security_file_permission", 0x20), loc("rw_verify_area", 0x38), "ret"),
        Branch(loc("rw_verify_area", 0x50), loc("vfs_write", 0x2F), "ret"),
        Branch(loc("vfs_write", 0x70, 602), loc(callee, 0, 12), "call"),
        Branch(loc(callee, 0x5), loc("vfs_write", 0x75), "ret"),
        Branch(loc("vfs_write", 0x90, 610), loc("fsnotify_modify"), "call"),
        Branch(loc("fsnotify_modify", 0x9), loc("vfs_write", 0x95), "ret"),
    ]
    hit = Hit("kfunc:vfs_write", cpu=1, pid=42, tid=42, retval=1, branches=b)
    return Trace(["kfunc:vfs_write"], "graph", [hit], kernel_release="6.12.117+deb12-amd64")


def record(nodeid: str, trace: Trace, golden: list[GoldenResult] | None = None) -> TestRecord:
    rec = TestRecord(nodeid, outcome="failed" if golden else "passed", golden=golden or [])
    rec.checked_traces.append(trace)
    return rec


def mismatch() -> GoldenResult:
    return GoldenResult(
        name="test_write",
        path=Path("__lbr_golden__/test_x/test_write.lbr"),
        status="mismatch",
        level="function",
        message="",
        expected=(
            "hit kfunc:vfs_write",
            "vfs_write -> rw_verify_area",
            "vfs_write -> write_null",
        ),
        actual=("hit kfunc:vfs_write", "vfs_write -> rw_verify_area", "vfs_write -> write_full"),
    )


def test_the_diagram_draws_the_texts_call_tree() -> None:
    """The report part keeps each hit's call tree (`model.text.call_tree`), which the
    diagram draws under the target's label: one tree for text and page."""
    part = trace_json(write_trace())
    root = call_tree(part["hits"][0])
    (ksys,) = root.children
    (vfs,) = ksys.children
    assert (root.name, ksys.name, vfs.name) == ("kfunc:vfs_write", "ksys_write", "vfs_write")
    assert [c.name for c in vfs.children] == ["rw_verify_area", "write_null", "fsnotify_modify"]
    assert [c.name for c in vfs.children[0].children] == ["security_file_permission"]
    json.dumps(part)  # what the part file holds


def test_files_and_page(tmp_path: Path) -> None:
    text = write_test_files(
        tmp_path, record("tests/test_x.py::test_write", write_trace("write_full"), [mismatch()])
    )
    assert text.read_text().startswith("# backend=graph kernel=6.12.117+deb12-amd64 hits=1")
    # Call trees, the return value at the traced function, each call's line.
    assert text.read_text().splitlines()[2:5] == [
        "ksys_write",
        "  vfs_write = 1                              (fs/read_write.c:640)",
        "    rw_verify_area                           (fs/read_write.c:590)",
    ]
    page = write_html(tmp_path)
    assert page is not None
    html = page.read_text()
    assert html.count('<svg class="tree"') == 1 and html.count('<svg class="flame"') == 1
    assert 'class="new"' in html  # the call the golden trace lacks is highlighted
    assert "<th>golden (expected)</th><th>this run</th>" in html
    assert (
        '<td class="del">vfs_write -&gt; write_null</td><td class="ins">vfs_write -&gt; write_full</td>'
        in html
    )
    assert "<script" not in html and "<link" not in html  # self-contained


def test_capture_text_is_kept_beside_the_trace(tmp_path: Path) -> None:
    raw = (Path(__file__).parent / "data" / "ftrace-6.12-vfs_write.txt").read_text()
    t = write_trace("write_null")
    t.capture_text = raw
    text = write_test_files(tmp_path, record("tests/test_x.py::test_raw", t, []))
    assert (tmp_path / text.name.replace(".txt", ".capture.txt")).read_text() == raw
    plain = write_test_files(tmp_path, record("tests/test_x.py::test_no_raw", write_trace("a"), []))
    assert not (tmp_path / plain.name.replace(".txt", ".capture.txt")).exists()


def screenshot(html: str, tmp_path: Path) -> object:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (ci/setup installs it)")
    image = pytest.importorskip("PIL.Image")
    page = tmp_path / "index.html"
    page.write_text(html)
    png = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                "--window-size=1200,900",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return image.open(png).convert("RGB")  # type: ignore[attr-defined]


def count(img: object, colour: tuple[int, int, int], box: tuple[int, int, int, int]) -> int:
    region = img.crop(box)  # type: ignore[attr-defined]
    return sum(
        1
        for px in region.getdata()
        if all(abs(a - b) <= 6 for a, b in zip(px, colour, strict=True))
    )


def test_screenshot_shows_the_diagram(tmp_path: Path) -> None:
    parts = [
        {
            "nodeid": "tests/test_x.py::test_write",
            "outcome": "passed",
            "text": "t.txt",
            "traces": [
                __import__("pytest_lbr.report.render", fromlist=["x"]).trace_json(write_trace())
            ],
            "golden": [],
        }
    ]
    img = screenshot(render_html(parts), tmp_path)
    # The diagram sits under the heading, the index and the trace line: the band
    # y 90..400, x 0..700 holds 6 boxes (root + 5 calls) of ~18 px x 100+ px.
    band = (0, 90, 700, 400)
    assert count(img, ROOT_BLUE, band) > 1000, "no root box drawn"
    assert count(img, NODE_BLUE, band) > 5 * 1000, "call boxes missing"
    grey = img.crop(band).convert("L")  # type: ignore[attr-defined]
    values = list(grey.getdata())
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    assert variance > 300, f"diagram region looks blank (variance {variance:.0f})"
    # Below the page content the screenshot is plain background.
    assert count(img, (255, 255, 255), (0, 800, 1200, 900)) > 0.95 * 1200 * 100


def test_screenshot_marks_the_new_call_of_a_mismatch(tmp_path: Path) -> None:
    rec = record("tests/test_x.py::test_write", write_trace("write_full"), [mismatch()])
    write_test_files(tmp_path, rec)
    html = (write_html(tmp_path) or tmp_path).read_text()  # type: ignore[union-attr]
    img = screenshot(html, tmp_path)
    assert count(img, NEW_RED, (0, 0, 1200, 900)) > 1000, "the new call is not highlighted"
