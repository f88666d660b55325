"""`LbrSession`: the tracing side of the pytest plugin, kept in `config.stash`.

`pytest_lbr.plugin` declares the tracing options, the marker and the fixtures and
hands each one to this object: the options checked once, the backend probed once and
shared by every test's `Tracer`, the `lbr` marker's whole-body trace, progress lines,
each test's report files, the HTML report and the exit status for bisecting. Golden
checks, kernel splats, the results file and coverage are pytest plugins of their own
(`golden.py`, `splats.py`, `results_writer.py`, `coverage.py`). Importing this module
costs nothing measurable: the tracer, the capture backends and reports are imported
when first used, and without `--lbr` they never are.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.exit_codes import EXIT_CANNOT_TEST
from pytest_lbr.guest_mode import TRACING_PROPERTY
from pytest_lbr.names import BackendName, LbrFilter, PmuName, ScopeKind
from pytest_lbr.plugin.golden import golden_book
from pytest_lbr.plugin.shared import (
    VERDICT_KEY,
    TracingVerdict,
    choice,
    is_worker,
    known_record,
    option,
    record_of,
    written_of,
)
from pytest_lbr.progress import ProgressCallback, set_progress

if TYPE_CHECKING:
    from pytest_lbr.capture import Backend
    from pytest_lbr.model import Trace
    from pytest_lbr.tracer import Tracer

__all__ = ["SESSION_KEY", "LbrSession"]

DISABLED_REASON = "tracing disabled: run with --lbr"
_MARKER_KWARGS = {
    "golden",
    "level",
    "exclude",
    "keep",
    "collapse",
    "sort_hits",
    "scope",
    "pid",
    "cgroup",
}


SESSION_KEY = pytest.StashKey["LbrSession"]()


class LbrSession:
    """Per-session tracing state: options, the backend probe, the fixtures, reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.enabled = bool(option(config, "lbr"))
        self.backend = choice(
            "--lbr-backend / lbr_backend", BackendName, option(config, "lbr_backend") or "auto"
        )
        self.pmu = choice("--lbr-pmu / lbr_pmu", PmuName, option(config, "lbr_pmu") or "hardware")
        self.require = bool(option(config, "lbr_require"))
        chosen_filter = option(config, "lbr_filter") or None
        self.filter = (
            None
            if chosen_filter is None
            else choice("--lbr-filter / lbr_filter", LbrFilter, chosen_filter)
        )
        self.scope = choice("lbr_scope", ScopeKind, config.getini("lbr_scope") or "process")
        self.vmlinux = option(config, "lbr_vmlinux") or None
        report = option(config, "lbr_report")
        self.report_dir = Path(report).resolve() if report else None
        self.edges = bool(option(config, "lbr_edges"))
        self.is_worker = is_worker(config)
        if self.enabled and self.vmlinux:
            self._check_vmlinux(str(self.vmlinux))
        #: What `progress()` reported to before this session (put back at the end).
        self._previous_progress: ProgressCallback | None = None
        self._reports_progress = self.enabled
        if self._reports_progress:
            self._previous_progress = set_progress(self._progress)
        #: Tests that needed tracing, split by whether they could get it.
        self.traced_ok = 0
        self.traced_unavailable = 0
        self.unavailable_reason = ""
        self._probe: tuple[bool, str, str] | None = None
        #: The backend, resolved once by probe() and shared by every test's Tracer.
        self._backend: Backend | None = None
        if self.report_dir is not None and not self.is_worker:
            shutil.rmtree(self.report_dir / ".parts", ignore_errors=True)
        config.stash[VERDICT_KEY] = self.verdict  # the results file's session record

    def _progress(self, message: str) -> None:
        """Library progress (a long DWARF read...) as a line of pytest's terminal output."""
        plugins = self.config.pluginmanager
        terminal = plugins.get_plugin("terminalreporter")
        if terminal is None:  # -p no:terminal
            return
        capture = plugins.get_plugin("capturemanager")
        # Inside a test, output is captured: the line must reach the terminal now.
        with capture.global_and_fixture_disabled() if capture else nullcontext():
            terminal.write_line(f"lbr: {message}")

    @staticmethod
    def _check_vmlinux(path: str) -> None:
        # A wrong, truncated or non-ELF --lbr-vmlinux is a usage error of one line, not
        # a silent loss of file:line later (pyelftools is imported only when it is given).
        from pytest_lbr.symbols.vmlinux import VmlinuxError, check_matches_running

        try:
            check_matches_running(path)
        except VmlinuxError as exc:
            raise pytest.UsageError(f"--lbr-vmlinux / lbr_vmlinux: {exc}") from None

    # -- the lbr fixture and the marker ---------------------------------------------

    def add_marker_fixture(self, items: list[pytest.Item]) -> None:
        """Tests marked with targets get the `lbr` fixture even when they don't ask for it
        (a marker without targets only sets golden knobs: it needs no tracing)."""
        for item in items:
            marker = item.get_closest_marker("lbr")
            if marker is not None and marker.args and isinstance(item, pytest.Function):
                if "lbr" not in item.fixturenames:
                    item.fixturenames.append("lbr")

    def lbr_fixture(self, request: pytest.FixtureRequest) -> Generator[Tracer, None, None]:
        """Set up the `Tracer` for one test (or skip/error saying why), record it after."""
        item = request.node
        if not self.enabled:
            pytest.skip(DISABLED_REASON)
        available, backend, reason = self.probe()
        if not available:
            item.user_properties.append((TRACING_PROPERTY, "unavailable"))
            if self.require:
                pytest.fail(
                    f"tracing required (--lbr-require) but unavailable: {reason}", pytrace=False
                )
            pytest.skip(reason)
        item.user_properties.append((TRACING_PROPERTY, backend))
        from pytest_lbr.tracer import Tracer

        assert self._backend is not None  # probe() resolved it
        tracer = Tracer(
            backend=self._backend,
            filter=self.filter,
            vmlinux=str(self.vmlinux) if self.vmlinux else None,
            scope=self.scope,
            written=written_of(item),  # the `bpf` fixture's loader adds to it
        )
        # Before the body: what the first trace would otherwise do in the test's
        # process (a tracefs instance made with mkdir...), which the test's own
        # programs would count as the test's work.
        from pytest_lbr.capture import CaptureError

        try:
            tracer.prepare()
        except CaptureError:
            pass  # the test's first trace says why, where it traces
        record = record_of(item)
        record.tracer_traces = tracer.traces  # the same list: every trace the test takes
        tracer.golden_checker = lambda trace, name=None, level="function": self.check_golden(
            item, trace, name=name, level=level
        )
        try:
            yield tracer
        finally:
            tracer.close()  # only what the test resolved itself: the session's backend stays
        self.finish_record(item)

    def golden_fixture(
        self, request: pytest.FixtureRequest
    ) -> Generator[Callable[..., None], None, None]:
        """The `lbr_golden` fixture: golden checks without tracing; reported like traces."""
        item = request.node
        yield lambda trace, name=None, level="function": self.check_golden(
            item, trace, name=name, level=level
        )
        self.finish_record(item)

    def probe(self) -> tuple[bool, str, str]:
        """(available, backend, reason) for the configured backend, probed once."""
        if self._probe is None:
            try:
                from pytest_lbr.capture import resolve_backend

                self._backend = backend = resolve_backend(self.backend, pmu=self.pmu)
                cap = backend.capability
                self._probe = (cap.available, cap.backend, cap.reason if not cap.available else "")
            except Exception as e:  # a backend that cannot even be imported is unavailable
                self._probe = (
                    False,
                    str(self.backend),  # a plain str: xdist's execnet sends no str subclass
                    f"{self.backend} backend: {type(e).__name__}: {e}",
                )
        return self._probe

    def verdict(self) -> TracingVerdict:
        """Whether this session can trace (`probe`), and why not."""
        if not self.enabled:
            return TracingVerdict("", False, DISABLED_REASON)
        available, backend, reason = self.probe()
        return TracingVerdict(backend, available, reason)

    def close_backend(self) -> None:
        """Release what the session's backend kept set up (the graph backend's tracer)."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    @contextmanager
    def marked_body(self, item: pytest.Item) -> Iterator[None]:
        """Trace the whole test body for `@pytest.mark.lbr(targets...)`, then golden-check."""
        marker = item.get_closest_marker("lbr")
        tracer = getattr(item, "funcargs", {}).get("lbr")
        if marker is None or tracer is None or not marker.args:
            if marker is not None and marker.kwargs.get("golden") and not marker.args:
                pytest.fail("@pytest.mark.lbr(golden=True) needs targets to trace", pytrace=False)
            yield
            return
        unknown = set(marker.kwargs) - _MARKER_KWARGS
        if unknown:
            pytest.fail(
                f"@pytest.mark.lbr: unknown keyword(s) {', '.join(sorted(unknown))}", pytrace=False
            )
        from pytest_lbr.capture import CaptureError
        from pytest_lbr.targets import TargetError

        with ExitStack() as stack:
            problem = None
            try:
                whose = {
                    k: marker.kwargs[k] for k in ("scope", "pid", "cgroup") if k in marker.kwargs
                }
                trace = stack.enter_context(tracer.trace(*marker.args, **whose))
            except (TargetError, CaptureError, ValueError) as exc:
                problem = str(exc)
            if problem is not None:
                # A bad target or a refused attach is the user's one line: not a
                # traceback through the plugin's hook wrappers (nor a chained one).
                pytest.fail(f"@pytest.mark.lbr: {problem}", pytrace=False)
            yield
        if marker.kwargs.get("golden"):
            self.check_golden(item, trace, level=marker.kwargs.get("level", "function"))

    def check_golden(
        self, item: pytest.Item, trace: Trace, name: str | None = None, level: str = "function"
    ) -> None:
        """Compare `trace` with the test's golden file, or write it under --lbr-golden-update."""
        golden_book(self.config).check(item, trace, name=name, level=level)

    # -- reports, assertion explanations ------------------------------------------

    def on_report(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """Remember the outcome; explain failed trace queries under the traceback."""
        record = known_record(item)
        if record is not None and report.when in ("setup", "call") and not report.passed:
            record.outcome = report.outcome
        if report.when == "call" and report.failed and call.excinfo is not None:
            if call.excinfo.errisinstance(AssertionError) and hasattr(
                report.longrepr, "addsection"
            ):
                from pytest_lbr.assertions import explain_failure
                from pytest_lbr.report.render import text_file

                full = None if self.report_dir is None else text_file(self.report_dir, item.nodeid)
                text = explain_failure(call.excinfo, full=None if full is None else str(full))
                if text:
                    report.longrepr.addsection("lbr: why the trace query failed", text)  # type: ignore[union-attr]

    def finish_record(self, item: pytest.Item) -> None:
        """At teardown: write the test's trace text and report part; JUnit properties."""
        record = known_record(item)
        if record is None or self.report_dir is None or record.reported:
            return
        if not record.traces and not record.splats:
            return
        record.reported = True  # a test may use both `lbr` and `lbr_golden`
        from pytest_lbr.report.render import write_test_files

        text_path = write_test_files(self.report_dir, record, edges=self.edges)
        item.user_properties.append(("lbr_trace", str(text_path)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook (the session is registered as a plugin): count tests that needed tracing,
        on the xdist controller too, from the properties the reports carry."""
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == TRACING_PROPERTY:
                if value == "unavailable":
                    self.traced_unavailable += 1
                else:
                    self.traced_ok += 1

    def finish(self, session: pytest.Session) -> None:
        """Exit status for bisecting, the HTML report (once, not per worker), and the
        line cache saved (per worker)."""
        self.close_backend()
        symbols = sys.modules.get("pytest_lbr.symbols")
        if symbols is not None:  # only if something was symbolized
            symbols.flush_symbolizers()
        if self.enabled and self.traced_unavailable and not self.traced_ok:
            self.unavailable_reason = self.probe()[2]
            session.exitstatus = EXIT_CANNOT_TEST
        if self.report_dir is not None and not self.is_worker:
            from pytest_lbr.report.render import write_html

            write_html(self.report_dir)

    def unconfigure(self) -> None:
        """Put back the progress listener this session replaced (pytester nests sessions)."""
        if self._reports_progress:
            self._reports_progress = False
            set_progress(self._previous_progress)

    def summary(self, terminal: Any) -> None:
        """Terminal summary: the report, why the exit status is 125."""
        if self.is_worker:
            return
        if self.report_dir is not None and (self.report_dir / "index.html").exists():
            terminal.write_line(f"lbr: report {self.report_dir / 'index.html'}")
        if self.unavailable_reason:
            terminal.write_line(
                f"lbr: tracing could not run in this session ({self.unavailable_reason}): "
                f"exit status {EXIT_CANNOT_TEST}"
            )
