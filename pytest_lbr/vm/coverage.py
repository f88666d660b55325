"""`--lbr-cov-report` through `pytest-lbr vm`: one report on the host for all kernels.

A guest can write only its results directory, and a report path a user types
(`--lbr-cov-report=lcov:cov.info`) is relative to the working directory, which the
guest sees read-only. So the runner takes the report options off the guests'
pytest arguments (they keep `--lbr-cov`: each writes its programs' `coverage`
records into its results file), and when every guest has ended writes the reports
here from those records: LCOV with one test name per kernel (genhtml and `lcov -a`
sum them), Cobertura summed over the kernels. The same sum is the term-missing
table it prints and the coverage section of summary.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest_lbr.names import CoverageFormat, parse_coverage_report
from pytest_lbr.results import Results

__all__ = ["CoverageReports", "split_coverage_args"]

_OPTION = "--lbr-cov-report"
#: The options that ask the guests for coverage (exact mode is coverage too).
_ASKS = {"--lbr-cov", "--lbr-cov-exact"}


@dataclass
class CoverageReports:
    """What the guests' pytest arguments asked of coverage: whether it is on, and the
    report files the runner writes (paths as typed, relative to the caller's cwd)."""

    enabled: bool = False
    files: list[tuple[CoverageFormat, Path]] = field(default_factory=list)

    def write(self, runs: Mapping[str, Results | None], cwd: Path) -> list[str]:
        """Write the report files from the kernels' coverage records (`runs`: kernel
        label -> its results); return what the runner says: the table, the files."""
        from pytest_lbr.coverage.book import CoverageBook
        from pytest_lbr.coverage.formats import report_text, term_missing

        books = {
            label: CoverageBook.from_records(asdict(r) for r in res.coverage)
            for label, res in runs.items()
            if res is not None and res.coverage
        }
        merged = CoverageBook.from_records(
            r.to_record() for book in books.values() for r in book.sorted()
        )
        programs = merged.sorted()
        if not programs:
            return ["coverage: no guest traced a BPF program (no coverage records)"]
        kernels = ", ".join(books)
        out = [f"coverage of the BPF programs, summed over {kernels}:", *term_missing(programs)]
        for fmt, path in self.files:
            where = path if path.is_absolute() else cwd / path
            where.parent.mkdir(parents=True, exist_ok=True)
            by_kernel = {f"kernel_{label}": book.sorted() for label, book in books.items()}
            text = report_text(fmt, by_kernel, str(cwd))
            where.write_text(text, encoding="utf-8")
            out.append(f"coverage: {fmt} {where}")
        return out

    def summary(self, runs: Mapping[str, Results | None]) -> list[str]:
        """summary.md's coverage section (empty when coverage was not asked for and no
        guest wrote a record)."""
        from pytest_lbr.coverage.book import CoverageBook
        from pytest_lbr.coverage.formats import markdown

        labels = [label for label, res in runs.items() if res is not None and res.coverage]
        if not self.enabled and not labels:  # on by the ini file: the records say so
            return []
        book = CoverageBook.from_records(
            asdict(r) for label in labels for r in (runs[label] or Results()).coverage
        )
        out = ["", "## Coverage of the BPF programs", ""]
        if not book.programs:
            return [*out, "No guest traced a BPF program."]
        return [*out, f"Summed over {', '.join(labels)}.", "", *markdown(book.sorted())]


def split_coverage_args(args: Sequence[str]) -> tuple[list[str], CoverageReports]:
    """The guests' pytest arguments without `--lbr-cov-report` (kept as `--lbr-cov`),
    and what coverage they asked for. Raises ValueError (one line) on a bad report."""
    guest: list[str] = []
    reports = CoverageReports()
    it = iter(args)
    for arg in it:
        if arg == "--":  # pytest's own end of options: the rest are paths
            guest.append(arg)
            guest.extend(it)
            break
        value = None
        if arg == _OPTION:
            value = next(it, "")
        elif arg.startswith(_OPTION + "="):
            value = arg.partition("=")[2]
        if value is None:
            guest.append(arg)
            reports.enabled = reports.enabled or arg in _ASKS
            continue
        fmt, path = parse_coverage_report(value)
        reports.files.append((fmt, Path(path)))
        reports.enabled = True
    if reports.files and not _ASKS & set(guest):
        guest.insert(0, "--lbr-cov")
    return guest, reports
