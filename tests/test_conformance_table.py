"""The conformance table generator (tests/conformance/table.py) on results records
written the way a guest writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_lbr.capture.lbr.backend import NO_BRANCHES_NOTE
from pytest_lbr.results import SessionRecord, TestResult, TraceRecord, append_record
from tests.conformance import table


def write(d: Path, *tests: TestResult) -> Path:
    d.mkdir(parents=True)
    for t in tests:
        append_record(d / "results.jsonl", t)
    append_record(d / "results.jsonl", SessionRecord("6.1.0-56-amd64", "x86_64", "graph", True))
    return d


def test_a_row_per_program_type_and_a_column_per_kernel(tmp_path: Path) -> None:
    traced = TraceRecord(["prog:name:on_msg"], "graph", 3, 0, ["4 runs in interrupt context"], 0)
    returned = TraceRecord(["prog:name:lsm_open"], "graph", 1, 0, [], 1)
    old = write(
        tmp_path / "6.1",
        TestResult("t.py::a", "passed", traces=[traced], properties={"program_type": "sk_msg"}),
        TestResult("t.py::b", "skipped", "tcx needs Linux 6.6", properties={"program_type": "tcx"}),
        TestResult("t.py::c", "passed"),  # no program type: not a row
    )
    new = write(
        tmp_path / "6.12",
        TestResult("t.py::a", "passed", traces=[traced], properties={"program_type": "sk_msg"}),
        TestResult("t.py::b", "passed", traces=[returned], properties={"program_type": "tcx"}),
    )
    text = table.table([old, new])
    assert text.splitlines() == [
        "| program type | 6.1 (graph) | 6.12 (graph) |",
        "| --- | --- | --- |",
        "| sk_msg | traced; no return value; N runs in interrupt context "
        "| traced; no return value; N runs in interrupt context |",
        "| tcx | skipped: tcx needs Linux 6.6 | traced; return values |",
    ]


def test_lbr_software_runs_get_their_own_columns_after_the_sessions(tmp_path: Path) -> None:
    graph = TraceRecord(["prog:name:on_msg"], "graph", 3, 0, [], 3)
    software = TraceRecord(["prog:name:on_msg"], "lbr", 3, 0, [NO_BRANCHES_NOTE], 3)
    typed = {"program_type": "sk_msg"}
    dirs = [
        write(
            tmp_path / k,
            TestResult("t.py::a[session]", "passed", traces=[graph], properties=typed),
            TestResult("t.py::a[lbr-software]", "passed", traces=[software], properties=typed),
        )
        for k in ("6.1", "6.12")
    ]
    assert table.table(dirs).splitlines()[:3] == [
        "| program type | 6.1 (graph) | 6.12 (graph) | 6.1 (lbr, software events) "
        "| 6.12 (lbr, software events) |",
        "| --- | --- | --- | --- | --- |",
        "| sk_msg | traced; return values | traced; return values "
        "| traced; return values; no branches (software events) "
        "| traced; return values; no branches (software events) |",
    ]


def test_check_fails_on_a_stale_table_and_write_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(f"intro\n{table.START}\n| old |\n{table.END}\nrest\n")
    monkeypatch.setattr(table, "GUIDE", guide)
    d = write(tmp_path / "6.12", TestResult("t::a", "passed", properties={"program_type": "lsm"}))
    assert table.main(["--check", str(d)]) == 1
    assert "conformance table is stale" in capsys.readouterr().err
    assert table.main(["--write", str(d)]) == 0
    assert table.main(["--check", str(d)]) == 0
    assert guide.read_text().startswith("intro\n") and guide.read_text().endswith("\nrest\n")
    assert "| lsm | no hits; no return value |" in guide.read_text()
