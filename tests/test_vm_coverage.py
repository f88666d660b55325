"""`pytest-lbr vm` and `--lbr-cov-report`: the guests write coverage records, the
runner writes one report here for all kernels (`pytest_lbr.vm.coverage`).

The records are those the examples wrote in the Debian 6.1 and 6.12 guests
(`pytest-lbr vm --kernel K -- examples --lbr --lbr-cov`, graph backend),
kept in tests/data/coverage-<kernel>.jsonl.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_lbr import vm
from pytest_lbr.coverage.book import CoverageBook
from pytest_lbr.results import Results, read_results
from pytest_lbr.vm.coverage import CoverageReports, split_coverage_args
from pytest_lbr.vm.run import GuestResult, write_summary

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
KERNELS = ("6.1", "6.12")


def _runs() -> dict[str, Results | None]:
    return {k: read_results(DATA / f"coverage-{k}.jsonl") for k in KERNELS}


def test_report_options_leave_the_guests_arguments() -> None:
    args, reports = split_coverage_args(
        [
            "examples",
            "--lbr",
            "--lbr-cov-report=lcov:cov.info",
            "--lbr-cov-report",
            "cobertura:c.xml",
        ]
    )
    assert args == ["--lbr-cov", "examples", "--lbr"]  # coverage stays on in the guests
    assert [(str(f), str(p)) for f, p in reports.files] == [
        ("lcov", "cov.info"),
        ("cobertura", "c.xml"),
    ]
    assert reports.enabled
    # After pytest's own `--` everything is a path; --lbr-cov alone asks for no file.
    args, reports = split_coverage_args(["--lbr-cov", "--", "--lbr-cov-report=lcov:x"])
    assert args == ["--lbr-cov", "--", "--lbr-cov-report=lcov:x"] and not reports.files
    assert reports.enabled
    assert not split_coverage_args(["examples"])[1].enabled


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("xml:cov.xml", "unknown coverage report format 'xml'; expected one of lcov, cobertura"),
        ("lcov", "'lcov' names no file; write lcov:PATH"),
    ],
)
def test_a_bad_report_is_a_usage_error_before_any_guest(
    value: str, says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = vm.main(["--results", str(tmp_path), "--dry-run", "--", f"--lbr-cov-report={value}"])
    err = capsys.readouterr().err
    assert status == 4
    assert err == f"[vm] error: --lbr-cov-report: {says} (FORMAT:PATH)\n"
    assert list(tmp_path.iterdir()) == []


def test_one_lcov_file_for_both_kernels_genhtml_renders_it(tmp_path: Path) -> None:
    runs = _runs()
    reports = CoverageReports(True, [])
    _, parsed = split_coverage_args(
        [
            f"--lbr-cov-report=lcov:{tmp_path / 'cov.info'}",
            f"--lbr-cov-report=cobertura:{tmp_path / 'cov.xml'}",
        ]
    )
    reports.files = parsed.files
    said = reports.write(runs, ROOT)
    books = {
        k: CoverageBook.from_records(asdict(r) for r in res.coverage)
        for k, res in runs.items()
        if res
    }
    programs = {p.program for book in books.values() for p in book.sorted()}
    # Every program of the examples has its line in the table, summed over both kernels.
    assert said[0] == "coverage of the BPF programs, summed over 6.1, 6.12:"
    for name in programs:
        assert any(line.split()[:1] == [name] for line in said), name
    assert said[-2:] == [
        f"coverage: lcov {tmp_path / 'cov.info'}",
        f"coverage: cobertura {tmp_path / 'cov.xml'}",
    ]

    # LCOV: one test name per kernel, each kernel's counts as its guest wrote them.
    info = (tmp_path / "cov.info").read_text()
    sections = info.split("TN:")[1:]
    assert [s.splitlines()[0] for s in sections] == ["kernel_6_1", "kernel_6_12"]
    for kernel, text in zip(KERNELS, sections, strict=True):
        wrote = {
            (str(ROOT / f), ln): n
            for p in books[kernel].sorted()
            for (f, ln), n in p.lines.items()
            if f == p.source
        }
        seen = {}
        for line in text.splitlines():
            if line.startswith("SF:"):
                file = line[3:]
            elif line.startswith("DA:"):
                ln, n = line[3:].split(",")
                seen[(file, int(ln))] = int(n)
        assert wrote.items() <= seen.items()

    # Cobertura: the two kernels summed.
    merged = CoverageBook()
    for book in books.values():
        for p in book.sorted():
            merged.merge(p)
    xml = ET.parse(tmp_path / "cov.xml").getroot()
    for cls in xml.iter("class"):
        cov = next(p for p in merged.sorted() if p.program == cls.get("name"))
        hits = {int(e.get("number", 0)): int(e.get("hits", 0)) for e in cls.iter("line")}
        assert hits == cov.file_lines(cls.get("filename", ""))

    if shutil.which("genhtml") is None:
        pytest.skip("genhtml is not installed (Debian: lcov; bash ci/setup installs it)")
    proc = subprocess.run(
        ["genhtml", "-q", "-o", str(tmp_path / "html"), str(tmp_path / "cov.info")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr


def test_the_summary_has_the_coverage_of_both_kernels(tmp_path: Path) -> None:
    runs = _runs()
    guests = [GuestResult(k, 0, tmp_path / k, res) for k, res in runs.items()]
    path = write_summary(tmp_path, guests, CoverageReports(True).summary(runs))
    text = path.read_text()
    assert "## Coverage of the BPF programs\n\nSummed over 6.1, 6.12.\n" in text
    assert "| `branch_cover` | `examples/branch_cover/branch_cover.bpf.c` |" in text
    # Coverage not asked for and no records: no section.
    assert CoverageReports().summary({"6.12": Results()}) == []
    assert (
        CoverageReports(True).summary({"6.12": Results()})[-1] == "No guest traced a BPF program."
    )


def test_the_guests_command_asks_for_coverage_not_the_file(tmp_path: Path) -> None:
    try:
        vm.resolve_kernel("6.12")
    except vm.VmError as exc:
        pytest.skip(str(exc))
    out = subprocess.run(
        [sys.executable, "-m", "pytest_lbr.vm", "--kernel", "6.12", "--tcg", "--dry-run", "--"]
        + ["examples", "--lbr", "--lbr-cov-report=lcov:cov.info"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("-- --lbr-cov examples --lbr'")
    assert list(tmp_path.iterdir()) == []  # --dry-run wrote nothing, no report either
