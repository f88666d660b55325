"""`--lbr-cov`: coverage of the BPF programs a session traces, as its own pytest plugin.

Every `lbr` fixture's tracer hands each finished trace to one `CoverageCollector`
(`pytest_lbr.coverage.collect`), which reads the traced programs while they are
loaded; xdist workers send theirs to the controller. At the end: the term-missing
table, the `--lbr-cov-report` files, and one `coverage` record per program in the
results file. Registered by `pytest_lbr.plugin` (its `pytest_plugins`).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.names import CoverageFormat, choices, parse_coverage_report
from pytest_lbr.plugin.shared import is_worker, option, option_group

if TYPE_CHECKING:
    from pytest_lbr.bpf.harness import AfterLoad
    from pytest_lbr.coverage.collect import CoverageCollector
    from pytest_lbr.coverage.exact import ExactCoverage
    from pytest_lbr.model import Trace
    from pytest_lbr.targets import Target

__all__ = ["CoverageSession"]

COVERAGE_KEY = pytest.StashKey["CoverageSession"]()
_WORKER_KEY = "lbr_coverage"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--lbr-cov",
        dest="lbr_cov",
        action="store_true",
        default=None,
        help="coverage of the traced BPF programs' C source lines, across all tests",
    )
    group.addoption(
        "--lbr-cov-report",
        dest="lbr_cov_report",
        action="append",
        default=None,
        metavar="FORMAT:PATH",
        help=f"also write coverage to PATH as FORMAT ({', '.join(choices(CoverageFormat))}); "
        "may be repeated",
    )
    group.addoption(
        "--lbr-cov-exact",
        dest="lbr_cov_exact",
        action="store_true",
        default=None,
        help="exact coverage: every program the bpf fixture loads runs with a counter per "
        "basic block (exact line and branch counts on any runner; needs no --lbr)",
    )
    parser.addini("lbr_cov", "default for --lbr-cov", type="bool")
    parser.addini("lbr_cov_exact", "default for --lbr-cov-exact", type="bool")
    parser.addini(
        "lbr_cov_report", "default for --lbr-cov-report (FORMAT:PATH lines)", type="linelist"
    )


def parse_report(value: str) -> tuple[CoverageFormat, Path]:
    """FORMAT:PATH -> (format, path); a usage error of one line otherwise."""
    try:
        fmt, path = parse_coverage_report(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--lbr-cov-report / lbr_cov_report: {exc} (FORMAT:PATH)") from None
    return fmt, Path(path)


class CoverageSession:
    """The session's coverage: options, the collector, the end-of-session output."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        reports = option(config, "lbr_cov_report") or []
        self.reports = [parse_report(r) for r in reports]
        #: Exact mode: the `bpf` fixture's programs run with counters.
        self.exact_mode = bool(option(config, "lbr_cov_exact"))
        # A report asked for, or exact mode, is coverage asked for.
        self.enabled = bool(option(config, "lbr_cov") or reports or self.exact_mode)
        self.is_worker = is_worker(config)
        self._collector: CoverageCollector | None = None
        self._exact: ExactCoverage | None = None
        #: The test running now (its node id; "" between tests): each trace's runs
        #: are kept under it too, "which tests ran this line".
        self.context = ""

    @property
    def collector(self) -> CoverageCollector:
        if self._collector is None:
            from pytest_lbr.coverage.collect import CoverageCollector

            lbr_filter = option(self.config, "lbr_filter") or None
            self._collector = CoverageCollector(
                every_branch=lbr_filter in (None, "any"),
                counted=self.exact.ids if self.exact_mode else frozenset(),
            )
        return self._collector

    @property
    def exact(self) -> ExactCoverage:
        if self._exact is None:
            from pytest_lbr.coverage.exact import ExactCoverage

            self._exact = ExactCoverage()
        return self._exact

    def read_counts(self) -> None:
        """Exact mode: add the counters' runs since the last read, to the test running."""
        if self._exact is not None:
            self._exact.read_into(self.collector.book, self.context)

    def watch(self, tracer: Any) -> None:
        """Collect every trace `tracer` finishes, with the tracer's book of what its
        programs were loaded from (`Tracer.written`, the `bpf` fixture's)."""

        def add(trace: Trace, targets: list[Target]) -> None:
            written = getattr(tracer, "written", None)
            self.collector.add(trace, targets, context=self.context, written=written)

        tracer.finished.append(add)

    def worker_done(self, node: Any) -> None:
        """xdist controller: add a worker's coverage."""
        from pytest_lbr.coverage.book import ProgramCoverage

        for record in getattr(node, "workeroutput", {}).get(_WORKER_KEY, []):
            self.collector.book.merge(ProgramCoverage.from_record(record))

    def finish(self) -> None:
        """Workers send their coverage on; the rest write the report files and records."""
        self.read_counts()
        if self._exact is not None:
            self.collector.problems.extend(self._exact.problems)
            self._exact.close()
        if self._collector is None and not self.reports:
            return
        programs = self.collector.book.sorted()
        if self.is_worker:
            self.config.workeroutput[_WORKER_KEY] = [p.to_record() for p in programs]  # type: ignore[attr-defined]
            return
        from pytest_lbr.coverage.formats import report_text

        written = []
        for fmt, path in self.reports:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                text = report_text(fmt, {"": programs})
                path.write_text(text)
                written.append((fmt, path))
            except OSError as exc:  # a read-only tree: a pytest-lbr vm guest's, from the ini
                self.collector.problems.append(
                    f"coverage: cannot write {path}: {exc.strerror or exc} (under pytest-lbr "
                    "vm, give --lbr-cov-report after -- and the runner writes it)"
                )
        self.reports = written
        self._write_results(programs)
        report_dir = option(self.config, "lbr_report")
        if report_dir:  # the page is built after this (tryfirst below)
            from pytest_lbr.coverage.html import write_part

            write_part(Path(report_dir).resolve(), programs)

    def _write_results(self, programs: list[Any]) -> None:
        from pytest_lbr.results import CoverageRecord, append_record

        path = option(self.config, "lbr_results")
        if not path:
            return
        for cov in programs:
            append_record(Path(path).resolve(), CoverageRecord(**cov.to_record()))

    def summary(self, terminal: Any) -> None:
        """The term-missing table, the problems met, the files written."""
        if self.is_worker:
            return
        from pytest_lbr.coverage.formats import term_missing

        terminal.write_sep("-", "lbr coverage: BPF programs")
        programs = self.collector.book.sorted()
        if not programs:
            terminal.write_line("no BPF program was traced")
        for line in term_missing(programs) if programs else ():
            terminal.write_line(line)
        for problem in self.collector.problems:
            terminal.write_line(problem)
        for fmt, path in self.reports:
            terminal.write_line(f"lbr coverage: {fmt} {path}")


def _coverage(config: pytest.Config) -> CoverageSession | None:
    cov = config.stash.get(COVERAGE_KEY, None)
    return cov if cov is not None and cov.enabled else None


def load_hook(config: pytest.Config) -> AfterLoad | None:
    """What the `bpf` fixture runs after each load: exact mode's counters, or nothing."""
    cov = _coverage(config)
    return cov.exact.after_load if cov is not None and cov.exact_mode else None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[COVERAGE_KEY] = CoverageSession(config)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    value = yield
    cov = _coverage(request.config)
    if cov is not None and fixturedef.argname == "lbr" and hasattr(value, "finished"):
        cov.watch(value)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    cov = _coverage(item.config)
    if cov is None:
        return (yield)
    cov.context = item.nodeid  # its fixtures' set-up and teardown included
    try:
        return (yield)
    finally:
        cov.read_counts()
        cov.context = ""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    cov = _coverage(node.config)
    if cov is not None:
        cov.worker_done(node)


@pytest.hookimpl(tryfirst=True)  # before the session builds the HTML report
def pytest_sessionfinish(session: pytest.Session) -> None:
    cov = _coverage(session.config)
    if cov is not None:
        cov.finish()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    cov = _coverage(config)
    if cov is not None:
        cov.summary(terminalreporter)
