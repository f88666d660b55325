"""`--lbr-results=FILE`, as a pytest plugin of its own: the results file
(docs/results.md).

Where a test runs (an xdist worker, or the only process), its traces, golden checks and
kernel splats go into its teardown report as one user property of plain JSON; where
reports are collected (the controller, or the only process), each test's phases are
folded into one `TestResult`, appended to the file when its teardown report arrives.
The session record (the lbr session's tracing verdict) and the splats no test reported
are written when the session ends. Registered by `pytest_lbr.plugin` (its
`pytest_plugins`).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.guest_mode import TRACING_PROPERTY, in_guest
from pytest_lbr.kernel.machine import machine
from pytest_lbr.plugin.shared import is_worker, known_record, option, option_group, tracing_verdict
from pytest_lbr.plugin.splats import kernel_splats
from pytest_lbr.report.record import TestRecord
from pytest_lbr.results import (
    GoldenRecord,
    SessionRecord,
    SplatRecord,
    TestResult,
    TraceRecord,
    append_record,
    golden_outcome,
)

if TYPE_CHECKING:
    from pytest_lbr.golden.check import GoldenResult

__all__ = ["RESULTS_PROPERTY", "ResultsBook"]

#: The user property carrying a test's traces, golden checks and splats (JSON).
RESULTS_PROPERTY = "lbr_results"
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--lbr-results",
        dest="lbr_results",
        default=None,
        metavar="FILE",
        help="write one JSON record per test to FILE (JSON Lines, docs/results.md; "
        "written by default inside pytest-lbr vm guests)",
    )
    parser.addini("lbr_results", "default for --lbr-results", type="string")


def pytest_configure(config: pytest.Config) -> None:
    path = option(config, "lbr_results")
    if path:
        book = ResultsBook(Path(path).resolve(), is_worker=is_worker(config))
        config.pluginmanager.register(book, "lbr-results")


class ResultsBook:
    """Writes the results file of one session."""

    def __init__(self, path: Path, *, is_worker: bool) -> None:
        self.path = path
        self.is_worker = is_worker
        self._tests: dict[str, dict[str, Any]] = {}
        if not is_worker:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")  # this session's records only

    # The outermost wrapper: it reads the test's record after the splat check
    # (splats.py) has added to it.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Hook: at the test's teardown report, where it ran, add what it traced and
        checked."""
        report = yield
        self.attach(report, known_record(item))
        return report

    def attach(self, report: pytest.TestReport, state: TestRecord | None) -> None:
        """At the test's teardown report: what it traced and checked, as a property."""
        if report.when != "teardown" or state is None:
            return
        data = {
            "traces": [
                {
                    "targets": list(t.targets),
                    "backend": t.backend,
                    "hits": len(t.hits),
                    "lost": t.lost,
                    "notes": list(t.notes),
                    "returns": sum(1 for h in t.hits if h.retval is not None),
                }
                for t in state.traces
            ],
            "golden": [_golden(g) for g in state.golden],
            # allow_splat: shown, never a failure (the summary lists them apart).
            "splats": [
                {"key": s.key, "title": s.title, "allowed": state.splats_allowed}
                for s in state.splats
            ],
        }
        report.user_properties.append((RESULTS_PROPERTY, json.dumps(data)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook, where reports are collected: fold in one phase; write the test at
        teardown."""
        if self.is_worker:
            return
        test = self._tests.setdefault(report.nodeid, {"outcome": "passed", "reason": ""})
        outcome: str = report.outcome
        if report.failed and report.when != "call":
            outcome = "error"
        if _RANK[outcome] > _RANK[test["outcome"]]:
            test["outcome"], test["reason"] = outcome, _reason(report)
            test["strict"] = str(report.longrepr).startswith("kernel test skipped inside")
        if report.when == "call":
            test["duration"] = report.duration
        test["kernel"] = test.get("kernel") or "kernel" in report.keywords
        for key, value in report.user_properties:
            if key == RESULTS_PROPERTY:
                test.update(json.loads(str(value)))
            elif key == TRACING_PROPERTY:
                test["tracer"] = test.get("tracer") or value != "unavailable"
            else:
                test.setdefault("properties", {})[key] = str(value)
        if report.when == "teardown":
            self._write(report.nodeid, self._tests.pop(report.nodeid))

    def _write(self, nodeid: str, test: dict[str, Any]) -> None:
        record = TestResult(
            nodeid,
            test["outcome"],
            test["reason"],
            round(test.get("duration", 0.0), 3),
            bool(test.get("strict")),
            [TraceRecord(**t) for t in test.get("traces", [])],
            [GoldenRecord(**g) for g in test.get("golden", [])],
            [
                SplatRecord(s["key"], s["title"], nodeid, bool(s.get("allowed")))
                for s in test.get("splats", [])
            ],
            bool(test.get("kernel")),
            bool(test.get("tracer")),
            test.get("properties", {}),
        )
        append_record(self.path, record)

    # A wrapper: it writes after every plugin's pytest_sessionfinish, so after the lbr
    # session's verdict and the splat watch's last read of the kernel log.
    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Hook, at the end: the session record, and each kernel splat no test reported."""
        yield
        if self.is_worker:
            return
        backend, tracing, reason = tracing_verdict(session.config)
        unreported = kernel_splats(session.config).unreported
        facts = machine()
        append_record(
            self.path,
            SessionRecord(facts.release, facts.name, backend, tracing, reason, in_guest()),
        )
        for splat in unreported:
            append_record(self.path, SplatRecord(splat["key"], splat["summary"]))


def _golden(result: GoldenResult) -> dict[str, Any]:
    from pytest_lbr.golden.storage import display_path

    return {
        "name": result.name,
        "file": str(display_path(result.path)),
        "status": golden_outcome(result.status),
        "level": result.level,
        "diff": result.diff,
        "recorded_release": result.recorded_release,
        "running_release": result.running_release,
    }


def _reason(report: pytest.TestReport) -> str:
    """One line: a skip's reason, or a failure's assertion line (else its first line)."""
    longrepr = report.longrepr
    if report.passed or longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    text = report.longreprtext if not isinstance(longrepr, str) else longrepr
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[0].strip() if lines else "")[:500]
