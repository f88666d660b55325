"""`LbrSession`: everything the pytest plugin does, kept in `config.stash`.

`pytest_lbr.plugin` only declares options, hooks and fixtures and hands each one
to this object. Importing this module costs nothing measurable: the tracer, the
capture backends, golden files and reports are imported when first used, and
without `--lbr` they never are.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.guest import in_guest, note_splats
from pytest_lbr.progress import ProgressCallback, set_progress
from pytest_lbr.record import TestRecord

if TYPE_CHECKING:
    from pytest_lbr.capture import Backend
    from pytest_lbr.golden.normalize import Normalization
    from pytest_lbr.golden.unused import GoldenUsage
    from pytest_lbr.kernel.kmsg import KernelLog, Splat
    from pytest_lbr.model import Trace
    from pytest_lbr.tracer import Tracer

__all__ = [
    "ALLOW_SPLAT_MARKER",
    "BACKEND_CHOICES",
    "EXIT_CANNOT_TRACE",
    "FILTER_CHOICES",
    "LEVEL_CHOICES",
    "SESSION_KEY",
    "SPLAT_CHOICES",
    "LbrSession",
    "TestRecord",
]

# Kept here (not imported from pytest_lbr.capture) so option parsing imports nothing heavy;
# tests/test_plugin.py checks they equal pytest_lbr.capture.BACKENDS / FILTERS / SCOPES.
BACKEND_CHOICES = ("auto", "lbr", "graph")
FILTER_CHOICES = (
    "any",
    "any_call",
    "any_return",
    "call",
    "ind_call",
    "cond",
    "call_stack",
    "ind_jump",
)
SCOPE_CHOICES = ("process", "children", "system")
LEVEL_CHOICES = ("function", "symbol", "line")
SPLAT_CHOICES = ("fail", "off")
ALLOW_SPLAT_MARKER = (
    "allow_splat: kernel splats during this test are shown in its report, not failures "
    "(a test that provokes one on purpose)"
)
#: The user property naming each kernel splat a test reported (its `Splat.key`).
_SPLAT_PROPERTY = "lbr_kernel_splat"
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
    """Per-session state: options, the backend probe, golden writes and reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.enabled = bool(self._option("lbr"))
        self.backend = str(self._option("lbr_backend") or "auto")
        self.require = bool(self._option("lbr_require"))
        self.filter = self._option("lbr_filter") or None
        self.scope = str(self.config.getini("lbr_scope") or "process")
        self.golden_update = bool(self._option("lbr_golden_update"))
        self.golden_prune = bool(self._option("lbr_golden_prune"))
        self.vmlinux = self._option("lbr_vmlinux") or None
        report = self._option("lbr_report")
        self.report_dir = Path(report).resolve() if report else None
        self.is_worker = hasattr(config, "workerinput")
        self.is_controller = (  # pytest-xdist's: it runs no test itself
            not self.is_worker
            and config.getoption("dist", "no") != "no"
            and bool(config.getoption("tx", None))
        )
        self._check_choice("--lbr-backend / lbr_backend", self.backend, BACKEND_CHOICES)
        # Kernel splats: on by default only in a pytest-lbr vm guest; a developer's own
        # kernel log holds other people's warnings.
        self.splat_mode = str(
            self._option("lbr_kernel_splats") or ("fail" if in_guest() else "off")
        )
        self._check_choice(
            "--lbr-kernel-splats / lbr_kernel_splats", self.splat_mode, SPLAT_CHOICES
        )
        if self.filter is not None:
            self._check_choice("--lbr-filter / lbr_filter", self.filter, FILTER_CHOICES)
        self._check_choice("lbr_scope", self.scope, SCOPE_CHOICES)
        if self.enabled and self.vmlinux:
            self._check_vmlinux(str(self.vmlinux))
        #: What `progress()` reported to before this session (put back at the end).
        self._previous_progress: ProgressCallback | None = None
        self._reports_progress = self.enabled
        if self._reports_progress:
            self._previous_progress = set_progress(self._progress)
        #: Golden files written in this process, and (controller) by the xdist workers.
        self.written: list[str] = []
        #: Golden checks per module (and, controller, the workers'), created by the first.
        self.golden_usage: GoldenUsage | None = None
        #: Golden files no test used (deleted under --lbr-golden-prune), at the end.
        self.unused: list[Path] = []
        # What an unused golden file must not be blamed on: node ids of each module's
        # collected tests, modules with deselected tests, node ids that passed / failed.
        self._collected: dict[str, list[str]] = {}
        self._deselected: set[str] = set()
        self._narrowed = any("::" in str(arg) for arg in config.args)
        self._passed: set[str] = set()
        self._failed: set[str] = set()
        #: Tests that needed tracing, split by whether they could get it.
        self.traced_ok = 0
        self.traced_unavailable = 0
        self.unavailable_reason = ""
        self._probe: tuple[bool, str, str] | None = None
        #: The backend, resolved once by probe() and shared by every test's Tracer.
        self._backend: Backend | None = None
        if self.report_dir is not None and not self.is_worker:
            shutil.rmtree(self.report_dir / ".parts", ignore_errors=True)
        self._kernel_log: KernelLog | None = None
        #: Why splats are not watched although asked for: the terminal header says it.
        self.splat_note = ""
        #: Splats no test of this process took, as plain data (controller: every worker's).
        self._loose_splats: list[dict[str, Any]] = []
        #: Keys of the splats tests reported (controller: every worker's tests).
        self._test_splats: set[str] = set()
        #: The loose splats no test reported, once each: they fail the run.
        self.unreported_splats: list[dict[str, Any]] = []
        self.kmsg_missed = 0
        if self.splat_mode == "fail":
            self._open_kernel_log()

    # -- options -------------------------------------------------------------------

    def _option(self, dest: str) -> Any:
        value = self.config.getoption(dest, default=None)
        if value is None or value is False:
            ini = self.config.getini(dest)
            return ini if ini not in ("", [], None) else value
        return value

    @staticmethod
    def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
        if value not in choices:
            raise pytest.UsageError(
                f"{what}: unknown value {value!r}; choose from {', '.join(choices)}"
            )

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
            item.user_properties.append(("lbr_tracing", "unavailable"))
            if self.require:
                pytest.fail(
                    f"tracing required (--lbr-require) but unavailable: {reason}", pytrace=False
                )
            pytest.skip(reason)
        item.user_properties.append(("lbr_tracing", backend))
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

                self._backend = backend = resolve_backend(self.backend)
                cap = backend.capability
                self._probe = (cap.available, cap.backend, cap.reason if not cap.available else "")
            except Exception as e:  # a backend that cannot even be imported is unavailable
                self._probe = (
                    False,
                    self.backend,
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
        from pytest_lbr.golden import Normalization
        from pytest_lbr.noise import DEFAULT_EXCLUDE

        marker = item.get_closest_marker("lbr")
        kw = marker.kwargs if marker else {}
        exclude = (
            *DEFAULT_EXCLUDE,
            *self.config.getini("lbr_golden_exclude"),
            *kw.get("exclude", ()),
        )
        keep = (*self.config.getini("lbr_golden_keep"), *kw.get("keep", ()))
        return Normalization(
            exclude=tuple(exclude),
            keep=tuple(keep),
            collapse=bool(kw.get("collapse", True)),
            sort_hits=bool(kw.get("sort_hits", False)),
        )

    def check_golden(
        self, item: pytest.Item, trace: Trace, name: str | None = None, level: str = "function"
    ) -> None:
        """Compare `trace` with the test's golden file, or write it under --lbr-golden-update."""
        from pytest_lbr.golden import LEVELS, GoldenCheck
        from pytest_lbr.golden.storage import display_path

        record = self.record(item)
        test_name = _golden_test_name(item) + (f".{name}" if name else "")
        if test_name in record.golden_names:
            pytest.fail(
                f"check_golden called twice for {test_name!r}: pass name= to tell them apart",
                pytrace=False,
            )
        record.golden_names.add(test_name)
        record.checked_traces.append(trace)
        if level not in LEVELS:
            pytest.fail(
                f"unknown golden level {level!r}; choose from {', '.join(LEVELS)}", pytrace=False
            )
        module_path = Path(str(item.path))
        check = GoldenCheck(module_path, self.normalization(item), update=self.golden_update)
        result = check.run(trace, test_name, level)
        record.golden.append(result)
        self._note_golden_use(module_path, result.path)
        shown = display_path(result.path)
        if result.status == "written":
            self.note_written(shown)
        item.user_properties.append(("lbr_golden", f"{result.status}: {shown}"))
        if not result.passed:
            pytest.fail(result.message, pytrace=False)

    def _note_golden_use(self, module_path: Path, path: Path) -> None:
        module = str(module_path)
        complete = not self._narrowed and module not in self._deselected
        self._usage().note(module_path, self._collected.get(module, ()), complete, path)

    def _usage(self) -> GoldenUsage:
        if self.golden_usage is None:  # only sessions that check golden traces import it
            from pytest_lbr.golden.unused import GoldenUsage

            self.golden_usage = GoldenUsage()
        return self.golden_usage

    def note_written(self, path: str) -> None:
        self.written.append(path)
        if self.is_worker:  # the controller prints one summary for all workers
            self.config.workeroutput.setdefault("lbr_written", []).append(path)  # type: ignore[attr-defined]

    def worker_done(self, node: Any) -> None:
        """xdist controller: collect what a worker wrote and which golden files it used."""
        output = getattr(node, "workeroutput", {})
        self.written.extend(output.get("lbr_written", []))
        self._loose_splats.extend(output.get("lbr_kernel_splats", []))
        self.kmsg_missed += output.get("lbr_kmsg_missed", 0)
        if output.get("lbr_golden_usage"):
            self._usage().merge(output["lbr_golden_usage"])

    # -- kernel splats ---------------------------------------------------------------

    def _open_kernel_log(self) -> None:
        from pytest_lbr.kernel.kmsg import KernelLog, KmsgError

        try:
            log = KernelLog()
        except KmsgError as exc:
            self.splat_note = f"lbr: kernel splats are not watched: {exc.strerror}"
            return
        if self.is_controller:
            log.close()  # readable: the workers watch it
        else:
            self._kernel_log = log

    def header_lines(self) -> list[str]:
        """Terminal header: why kernel splats are not watched, when asked for."""
        return [self.splat_note] if self.splat_note else []

    def _new_splats(self) -> list[Splat]:
        assert self._kernel_log is not None
        from pytest_lbr.kernel.kmsg import find_splats

        splats = find_splats(self._kernel_log.read_new())
        note_splats(splat.key for splat in splats)  # seen: the VM runner need not fail the guest
        return splats

    def _loose(self, splats: list[Splat], running: str | None) -> None:
        if running and self.is_worker:
            running = f"{self.config.workerinput['workerid']} {running}"  # type: ignore[attr-defined]
        for splat in splats:
            self._loose_splats.append(
                {
                    "key": splat.key,
                    "summary": splat.summary,
                    "text": splat.text,
                    "running": [running] if running else [],
                }
            )

    def splats_between_tests(self) -> None:
        """Before a test: what the kernel logged since the last one belongs to no test."""
        if self._kernel_log is not None:
            self._loose(self._new_splats(), running=None)

    def check_kernel_log(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A kernel splat during this phase of the test fails it (under `allow_splat`
        the report only shows it).

        Under xdist other workers' tests run at the same time, so a worker takes only
        splats in its own tasks (this process, a live child; under `allow_splat` also
        a process that has exited); any other (a kernel thread's, another worker's,
        an exited child's) goes to the controller, which fails the run with it once,
        naming the tests that were running, unless another worker's test took it.
        """
        if self._kernel_log is None:
            return
        splats = self._new_splats()
        if not splats:
            return
        allowed = item.get_closest_marker("allow_splat") is not None
        ours = [s for s in splats if not self.is_worker or _own_splat(s, allowed)]
        self._loose([s for s in splats if s not in ours], running=item.nodeid)
        if not ours:
            return
        title = "kernel splat (allowed: allow_splat)" if allowed else "kernel splat"
        report.sections.append((title, "\n\n".join(s.text for s in ours)))
        report.user_properties.extend((_SPLAT_PROPERTY, s.key) for s in ours)
        record = self.record(item)
        record.splats.extend(ours)
        record.splats_allowed = allowed
        if not allowed:
            record.outcome = "failed"
            if not report.failed:
                phase = "" if report.when == "call" else f" ({report.when})"
                more = f" (+{len(ours) - 1} more below)" if len(ours) > 1 else ""
                report.outcome = "failed"
                report.longrepr = f"kernel splat during this test{phase}: {ours[0].summary}{more}"
                if hasattr(report, "wasxfail"):
                    del report.wasxfail  # an expected failure is the test's, not the kernel's
        if self.report_dir is not None:
            from pytest_lbr.report import write_test_files

            write_test_files(self.report_dir, record)

    def _finish_splats(self, session: pytest.Session) -> None:
        if self._kernel_log is not None:
            self._loose(self._new_splats(), running=None)
            self.kmsg_missed += self._kernel_log.missed
            self._kernel_log.close()
            self._kernel_log = None
        if self.is_worker:
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output["lbr_kernel_splats"] = self._loose_splats
            output["lbr_kmsg_missed"] = self.kmsg_missed
            return
        merged: dict[str, dict[str, Any]] = {}
        for splat in self._loose_splats:  # once each, and none a test reported
            if splat["key"] not in self._test_splats:
                seen = merged.setdefault(splat["key"], {**splat, "running": []})
                seen["running"] += [r for r in splat["running"] if r not in seen["running"]]
        self.unreported_splats = list(merged.values())
        if self.unreported_splats and session.exitstatus in (0, 5):  # not over a worse one
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _splat_summary(self, terminal: Any) -> None:
        for splat in self.unreported_splats:
            terminal.write_sep("=", "lbr: kernel splat outside any test", red=True)
            if splat["running"]:
                terminal.write_line(
                    "in another process while these tests ran: " + ", ".join(splat["running"])
                )
            terminal.write_line(splat["text"])
        if self.unreported_splats:
            terminal.write_line(
                f"lbr: {len(self.unreported_splats)} kernel splat(s) outside any test: "
                "the run fails (--lbr-kernel-splats=off turns the check off)"
            )
        if self.kmsg_missed:
            terminal.write_line(
                f"lbr: the kernel overwrote its log {self.kmsg_missed} time(s) before pytest "
                "read it: a kernel splat may have gone unseen"
            )

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
        from pytest_lbr.report import write_test_files

        text_path = write_test_files(self.report_dir, record)
        item.user_properties.append(("lbr_trace", str(text_path)))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Hook: each module's tests, for unused golden files (per xdist worker: they
        all collect the same tests; the controller collects none)."""
        for item in session.items:
            self._collected.setdefault(str(item.path), []).append(item.nodeid)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Hook: a module with deselected tests (-k, --lbr-shard...) may have used more
        golden files than this session saw."""
        self._deselected.update(str(item.path) for item in items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook (the session is registered as a plugin): count tests that needed tracing,
        on the xdist controller too, from the properties the reports carry; note which
        tests passed, for unused golden files, and which kernel splats tests reported."""
        if report.failed:
            self._failed.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self._passed.add(report.nodeid)
        self._test_splats.update(str(v) for k, v in report.user_properties if k == _SPLAT_PROPERTY)
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == "lbr_tracing":
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
        self._finish_splats(session)
        if self.report_dir is not None and not self.is_worker:
            from pytest_lbr.report import write_html

            write_html(self.report_dir)
        if self.golden_usage and self.is_worker:
            self.config.workeroutput["lbr_golden_usage"] = self.golden_usage.to_json()  # type: ignore[attr-defined]
        elif self.golden_usage:
            self.unused = self.golden_usage.unused(self._passed - self._failed)
            if self.golden_prune:
                for path in self.unused:
                    path.unlink(missing_ok=True)

    def unconfigure(self) -> None:
        """Put back the progress listener this session replaced (pytester nests sessions);
        close the kernel log if the session ended before its finish."""
        if self._kernel_log is not None:
            self._kernel_log.close()
            self._kernel_log = None
        if self._reports_progress:
            self._reports_progress = False
            set_progress(self._previous_progress)

    def summary(self, terminal: Any) -> None:
        """Terminal summary: golden files written and unused, report, why the exit
        status is 125, kernel splats outside the tests."""
        if self.is_worker:
            return
        if self.written:
            terminal.write_sep("-", f"lbr: {len(self.written)} golden trace(s) written")
            for path in sorted(self.written):
                terminal.write_line(f"  {path}")
        if self.unused:
            from pytest_lbr.golden.storage import display_path

            head = f"lbr: {len(self.unused)} unused golden trace(s)"
            shown = ", ".join(display_path(path) for path in self.unused)
            if self.golden_prune:
                terminal.write_line(f"{head} deleted: {shown}")
            else:
                terminal.write_line(f"{head}: {shown} (--lbr-golden-prune deletes them)")
        if self.report_dir is not None and (self.report_dir / "index.html").exists():
            terminal.write_line(f"lbr: report {self.report_dir / 'index.html'}")
        if self.unavailable_reason:
            terminal.write_line(
                f"lbr: tracing could not run in this session ({self.unavailable_reason}): "
                f"exit status {EXIT_CANNOT_TRACE}"
            )
        self._splat_summary(terminal)


def _own_splat(splat: Splat, allowed: bool) -> bool:
    """Is the splat this xdist worker's? Its task is this process or a live child, or
    (for a test that provokes splats on purpose) one that has exited since."""
    from pytest_lbr.kernel.kmsg import is_own_task

    if splat.pid is None or splat.pid <= 0:  # no task named, or the idle task
        return False
    if is_own_task(splat.pid):
        return True
    return allowed and not os.path.exists(f"/proc/{splat.pid}")


def _golden_test_name(item: pytest.Item) -> str:
    # "test_mod.py::TestX::test_y[a]" -> "TestX.test_y[a]": unique within the module.
    from pytest_lbr.golden.storage import safe_file_name

    parts = item.nodeid.split("::")[1:]
    return safe_file_name(".".join(parts) or item.name)
