"""`LbrSession`: everything the pytest plugin does, kept in `config.stash`.

`pytest_lbr.plugin` only declares options, hooks and fixtures and hands each one
to this object. Importing this module costs nothing measurable: the tracer, the
capture backends, golden files and reports are imported when first used, and
without `--lbr` they never are.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.guest_mode import TRACING_PROPERTY, in_guest
from pytest_lbr.names import (
    BackendName,
    LbrFilter,
    Name,
    PmuName,
    ScopeKind,
    SplatMode,
    choices,
    parse_name,
)
from pytest_lbr.plugin.golden import GoldenBook
from pytest_lbr.plugin.results_writer import ResultsBook
from pytest_lbr.plugin.splats import KernelSplats
from pytest_lbr.progress import ProgressCallback, set_progress
from pytest_lbr.report.record import TestRecord

if TYPE_CHECKING:
    from pytest_lbr.capture import Backend
    from pytest_lbr.golden.normalize import Normalization
    from pytest_lbr.model import Trace
    from pytest_lbr.tracer import Tracer

__all__ = [
    "ALLOW_SPLAT_MARKER",
    "EXIT_CANNOT_TRACE",
    "SESSION_KEY",
    "LbrSession",
    "TestRecord",
]

ALLOW_SPLAT_MARKER = (
    "allow_splat: kernel splats during this test are shown in its report, not failures "
    "(a test that provokes one on purpose)"
)
#: `git bisect run` reads 125 as "this commit cannot be tested": used when tracing could not run.
EXIT_CANNOT_TRACE = 125
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


RECORD_KEY = pytest.StashKey[TestRecord]()
SESSION_KEY = pytest.StashKey["LbrSession"]()


class LbrSession:
    """Per-session state: options, the backend probe and the fixtures; golden
    bookkeeping (`GoldenBook`), kernel splats (`KernelSplats`) and reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.enabled = bool(self._option("lbr"))
        # Each choice is checked here, where the option or ini key arrives (argparse
        # checks the command line's; nothing checks an ini file's but this).
        self.backend = self._choice(
            "--lbr-backend / lbr_backend", BackendName, self._option("lbr_backend") or "auto"
        )
        self.pmu = self._choice(
            "--lbr-pmu / lbr_pmu", PmuName, self._option("lbr_pmu") or "hardware"
        )
        self.require = bool(self._option("lbr_require"))
        chosen_filter = self._option("lbr_filter") or None
        self.filter = (
            None
            if chosen_filter is None
            else self._choice("--lbr-filter / lbr_filter", LbrFilter, chosen_filter)
        )
        self.scope = self._choice(
            "lbr_scope", ScopeKind, self.config.getini("lbr_scope") or "process"
        )
        self.vmlinux = self._option("lbr_vmlinux") or None
        report = self._option("lbr_report")
        self.report_dir = Path(report).resolve() if report else None
        results = self._option("lbr_results")
        self.is_worker = hasattr(config, "workerinput")
        self.is_controller = (  # pytest-xdist's: it runs no test itself
            not self.is_worker
            and config.getoption("dist", "no") != "no"
            and bool(config.getoption("tx", None))
        )
        # Kernel splats: on by default only in a pytest-lbr vm guest; a developer's own
        # kernel log holds other people's warnings.
        self.splat_mode = self._choice(
            "--lbr-kernel-splats / lbr_kernel_splats",
            SplatMode,
            self._option("lbr_kernel_splats") or ("fail" if in_guest() else "off"),
        )
        if self.enabled and self.vmlinux:
            self._check_vmlinux(str(self.vmlinux))
        #: What `progress()` reported to before this session (put back at the end).
        self._previous_progress: ProgressCallback | None = None
        self._reports_progress = self.enabled
        if self._reports_progress:
            self._previous_progress = set_progress(self._progress)
        #: Golden checks, files written and unused.
        self.golden = GoldenBook(
            config,
            update=bool(self._option("lbr_golden_update")),
            prune=bool(self._option("lbr_golden_prune")),
            is_worker=self.is_worker,
        )
        #: Tests that needed tracing, split by whether they could get it.
        self.traced_ok = 0
        self.traced_unavailable = 0
        self.unavailable_reason = ""
        self._probe: tuple[bool, str, str] | None = None
        #: The backend, resolved once by probe() and shared by every test's Tracer.
        self._backend: Backend | None = None
        if self.report_dir is not None and not self.is_worker:
            shutil.rmtree(self.report_dir / ".parts", ignore_errors=True)
        #: The results file (--lbr-results).
        self.results = ResultsBook(
            Path(results).resolve() if results else None, is_worker=self.is_worker
        )
        #: The kernel log, watched for splats.
        self.splats = KernelSplats(
            config,
            self.splat_mode == "fail",
            is_worker=self.is_worker,
            is_controller=self.is_controller,
        )

    @property
    def golden_update(self) -> bool:
        """--lbr-golden-update: write golden traces instead of comparing."""
        return self.golden.update

    @property
    def golden_prune(self) -> bool:
        """--lbr-golden-prune: delete the golden traces no test used."""
        return self.golden.prune

    # -- options -------------------------------------------------------------------

    def _option(self, dest: str) -> Any:
        value = self.config.getoption(dest, default=None)
        if value is None or value is False:
            ini = self.config.getini(dest)
            return ini if ini not in ("", [], None) else value
        return value

    @staticmethod
    def _choice(what: str, kind: type[Name], value: str) -> Name:
        """The member of `kind` an option or ini key (`what`) names; else a usage error
        of one line that lists the accepted values."""
        try:
            return parse_name(kind, value)
        except ValueError:
            raise pytest.UsageError(
                f"{what}: unknown value {value!r}; choose from {', '.join(choices(kind))}"
            ) from None

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
        )
        record = self.record(item)
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

    # -- golden traces -----------------------------------------------------------

    def normalization(self, item: pytest.Item) -> Normalization:
        """Default exclusions + ini `lbr_golden_exclude`/`lbr_golden_keep` + marker knobs."""
        return self.golden.normalization(item)

    def check_golden(
        self, item: pytest.Item, trace: Trace, name: str | None = None, level: str = "function"
    ) -> None:
        """Compare `trace` with the test's golden file, or write it under --lbr-golden-update."""
        self.golden.check(item, self.record(item), trace, name=name, level=level)

    def worker_done(self, node: Any) -> None:
        """xdist controller: collect what a worker wrote, which golden files it used,
        and the kernel splats no test of it took."""
        output = getattr(node, "workeroutput", {})
        self.golden.worker_done(output)
        self.splats.worker_done(output)

    # -- kernel splats ---------------------------------------------------------------

    def header_lines(self) -> list[str]:
        """Terminal header: why kernel splats are not watched, when asked for."""
        return [self.splats.note] if self.splats.note else []

    def splats_between_tests(self) -> None:
        """Before a test: what the kernel logged since the last one belongs to no test."""
        self.splats.between_tests()

    def check_kernel_log(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A kernel splat during this phase of the test fails it (`KernelSplats.check`);
        the test's report files are rewritten to show it."""
        if self.splats.check(item, report, self.record(item)) and self.report_dir is not None:
            from pytest_lbr.report.render import write_test_files

            write_test_files(self.report_dir, self.record(item))

    # -- records, reports, assertion explanations ---------------------------------

    def record(self, item: pytest.Item) -> TestRecord:
        if RECORD_KEY not in item.stash:
            item.stash[RECORD_KEY] = TestRecord(item.nodeid)
        return item.stash[RECORD_KEY]

    def on_report(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """Remember the outcome; explain failed trace queries under the traceback."""
        if RECORD_KEY in item.stash and report.when in ("setup", "call") and not report.passed:
            item.stash[RECORD_KEY].outcome = report.outcome
        self.results.attach(report, item.stash.get(RECORD_KEY, None))
        if report.when == "call" and report.failed and call.excinfo is not None:
            if call.excinfo.errisinstance(AssertionError) and hasattr(
                report.longrepr, "addsection"
            ):
                from pytest_lbr.assertions import explain_failure

                text = explain_failure(call.excinfo)
                if text:
                    report.longrepr.addsection("lbr: why the trace query failed", text)  # type: ignore[union-attr]

    def finish_record(self, item: pytest.Item) -> None:
        """At teardown: write the test's trace text and report part; JUnit properties."""
        record = item.stash.get(RECORD_KEY, None)
        if record is None or self.report_dir is None or record.reported:
            return
        if not record.traces and not record.splats:
            return
        record.reported = True  # a test may use both `lbr` and `lbr_golden`
        from pytest_lbr.report.render import write_test_files

        text_path = write_test_files(self.report_dir, record)
        item.user_properties.append(("lbr_trace", str(text_path)))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Hook: each module's tests, for unused golden files (per xdist worker: they
        all collect the same tests; the controller collects none)."""
        self.golden.collected(session.items)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Hook: a module with deselected tests (-k, --lbr-shard...) may have used more
        golden files than this session saw."""
        self.golden.deselected(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook (the session is registered as a plugin): count tests that needed tracing,
        on the xdist controller too, from the properties the reports carry; note which
        tests passed, for unused golden files, and which kernel splats tests reported."""
        self.golden.note_report(report)
        self.splats.note_report(report)
        self.results.note_report(report)
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == TRACING_PROPERTY:
                if value == "unavailable":
                    self.traced_unavailable += 1
                else:
                    self.traced_ok += 1

    def finish(self, session: pytest.Session) -> None:
        """Exit status for bisecting (and 1 for a kernel splat outside the tests), the
        HTML report (once, not per worker), and the line cache saved (per worker)."""
        self.close_backend()
        symbols = sys.modules.get("pytest_lbr.symbols")
        if symbols is not None:  # only if something was symbolized
            symbols.flush_symbolizers()
        if self.enabled and self.traced_unavailable and not self.traced_ok:
            self.unavailable_reason = self.probe()[2]
            session.exitstatus = EXIT_CANNOT_TRACE
        self.splats.finish(session)
        self._finish_results()
        if self.report_dir is not None and not self.is_worker:
            from pytest_lbr.report.render import write_html

            write_html(self.report_dir)
        self.golden.finish()

    def _finish_results(self) -> None:
        if self.results.path is None:
            return
        if not self.enabled:
            self.results.finish("", False, "tracing disabled: run with --lbr", [])
            return
        available, backend, reason = self.probe()
        self.results.finish(backend, available, reason, self.splats.unreported)

    def unconfigure(self) -> None:
        """Put back the progress listener this session replaced (pytester nests sessions);
        close the kernel log if the session ended before its finish."""
        self.splats.close()
        if self._reports_progress:
            self._reports_progress = False
            set_progress(self._previous_progress)

    def summary(self, terminal: Any) -> None:
        """Terminal summary: golden files written and unused, report, why the exit
        status is 125, kernel splats outside the tests."""
        if self.is_worker:
            return
        self.golden.summary(terminal)
        if self.report_dir is not None and (self.report_dir / "index.html").exists():
            terminal.write_line(f"lbr: report {self.report_dir / 'index.html'}")
        if self.unavailable_reason:
            terminal.write_line(
                f"lbr: tracing could not run in this session ({self.unavailable_reason}): "
                f"exit status {EXIT_CANNOT_TRACE}"
            )
        self.splats.summary(terminal)
