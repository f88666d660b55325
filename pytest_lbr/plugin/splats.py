"""Kernel splats, as a pytest plugin of its own: `--lbr-kernel-splats`, the
`allow_splat` marker, and `KernelSplats`, the session's watch on the kernel log.

A kernel splat (oops, WARNING, BUG, lockdep report...) during a test fails it,
unless the test is marked `allow_splat`; one outside any test fails the run.
Under pytest-xdist each worker watches the log and takes the splats of its own
tasks; the rest go to the controller as plain data, which fails the run with each
once, naming the tests that were running. Registered by `pytest_lbr.plugin` (its
`pytest_plugins`); it needs no tracing, so it watches without `--lbr` too.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.guest_mode import in_guest, note_splats
from pytest_lbr.names import SplatMode, choices
from pytest_lbr.plugin.shared import (
    choice,
    is_controller,
    is_worker,
    option,
    option_group,
    record_of,
)
from pytest_lbr.report.record import TestRecord

if TYPE_CHECKING:
    from pytest_lbr.kernel.kmsg import KernelLog, Splat

__all__ = ["ALLOW_SPLAT_MARKER", "SPLAT_PROPERTY", "KernelSplats", "kernel_splats"]

#: The user property naming each kernel splat a test reported (its `Splat.key`).
SPLAT_PROPERTY = "lbr_kernel_splat"
ALLOW_SPLAT_MARKER = (
    "allow_splat: kernel splats during this test are shown in its report, not failures "
    "(a test that provokes one on purpose)"
)
SPLATS_KEY = pytest.StashKey["KernelSplats"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--lbr-kernel-splats",
        dest="lbr_kernel_splats",
        default=None,
        choices=choices(SplatMode),
        help="fail: a kernel splat (WARNING:, BUG:, Oops, KASAN, RCU stall...) in the "
        "kernel log fails the test it happened in, or the run (default: fail inside "
        "pytest-lbr vm guests, off elsewhere)",
    )
    parser.addini("lbr_kernel_splats", "default for --lbr-kernel-splats", type="string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", ALLOW_SPLAT_MARKER)
    # On by default only in a pytest-lbr vm guest: a developer's own kernel log holds
    # other people's warnings.
    mode = choice(
        "--lbr-kernel-splats / lbr_kernel_splats",
        SplatMode,
        option(config, "lbr_kernel_splats") or ("fail" if in_guest() else "off"),
    )
    watch = config.stash[SPLATS_KEY] = KernelSplats(
        config,
        mode == SplatMode.FAIL,
        is_worker=is_worker(config),
        is_controller=is_controller(config),
    )
    # Registered as a plugin: its hooks (pytest_runtest_logreport gets no config and
    # runs on the xdist controller for every worker's reports).
    config.pluginmanager.register(watch, "lbr-kernel-splats")


def kernel_splats(config: pytest.Config) -> KernelSplats:
    """The session's watch on the kernel log."""
    return config.stash[SPLATS_KEY]


class KernelSplats:
    """The kernel log of one pytest process, read between and after test phases.

    `watch`: whether to read it at all (`--lbr-kernel-splats=fail`). On the xdist
    controller (`is_controller`) the log is only checked for readability: the
    workers (`is_worker`) watch it.
    """

    def __init__(
        self, config: pytest.Config, watch: bool, *, is_worker: bool, is_controller: bool
    ) -> None:
        self.config = config
        self.is_worker = is_worker
        self._log: KernelLog | None = None
        #: Why splats are not watched although asked for: the terminal header says it.
        self.note = ""
        #: Splats no test of this process took, as plain data (controller: every worker's).
        self._loose: list[dict[str, Any]] = []
        #: Keys of the splats tests reported (controller: every worker's tests).
        self._reported: set[str] = set()
        #: The loose splats no test reported, once each: they fail the run.
        self.unreported: list[dict[str, Any]] = []
        #: Times the kernel overwrote its log before it was read.
        self.missed = 0
        if watch:
            self._open(is_controller)

    def _open(self, is_controller: bool) -> None:
        from pytest_lbr.kernel.kmsg import KernelLog, KmsgError

        try:
            log = KernelLog()
        except KmsgError as exc:
            self.note = f"lbr: kernel splats are not watched: {exc.strerror}"
            return
        if is_controller:
            log.close()  # readable: the workers watch it
        else:
            self._log = log

    def _new(self) -> list[Splat]:
        assert self._log is not None
        from pytest_lbr.kernel.kmsg import find_splats

        splats = find_splats(self._log.read_new())
        note_splats(splat.key for splat in splats)  # seen: the VM runner need not fail the guest
        return splats

    def _keep_loose(self, splats: list[Splat], running: str | None) -> None:
        if running and self.is_worker:
            running = f"{self.config.workerinput['workerid']} {running}"  # type: ignore[attr-defined]
        for splat in splats:
            self._loose.append(
                {
                    "key": splat.key,
                    "summary": splat.summary,
                    "text": splat.text,
                    "running": [running] if running else [],
                }
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self) -> None:
        """Hook, before a test: what the kernel logged since the last one belongs to no test."""
        if self._log is not None:
            self._keep_loose(self._new(), running=None)

    # Registered after pytest's own plugins, so this runs after they made the report
    # (an xfail's outcome); the results file's wrapper (tryfirst) reads it after this.
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Hook: check the kernel log after each phase of a test; rewrite the test's
        report files (--lbr-report) when it took a splat."""
        report = yield
        record = record_of(item)
        if self.check(item, report, record):
            report_dir = option(self.config, "lbr_report")
            if report_dir:
                from pytest_lbr.report.render import write_test_files

                write_test_files(Path(report_dir).resolve(), record)
        return report

    def check(self, item: pytest.Item, report: pytest.TestReport, record: TestRecord) -> bool:
        """A kernel splat during this phase of the test fails it (under `allow_splat`
        the report only shows it); whether the test took any (`record` holds them).

        Under xdist other workers' tests run at the same time, so a worker takes only
        splats in its own tasks (this process, a live child; under `allow_splat` also
        a process that has exited); any other (a kernel thread's, another worker's,
        an exited child's) goes to the controller, which fails the run with it once,
        naming the tests that were running, unless another worker's test took it.
        """
        if self._log is None:
            return False
        splats = self._new()
        if not splats:
            return False
        allowed = item.get_closest_marker("allow_splat") is not None
        ours = [s for s in splats if not self.is_worker or _own_splat(s, allowed)]
        self._keep_loose([s for s in splats if s not in ours], running=item.nodeid)
        if not ours:
            return False
        title = "kernel splat (allowed: allow_splat)" if allowed else "kernel splat"
        report.sections.append((title, "\n\n".join(s.text for s in ours)))
        report.user_properties.extend((SPLAT_PROPERTY, s.key) for s in ours)
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
        return True

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook, in any process, the xdist controller too: the splats a test's report names."""
        self._reported.update(str(v) for k, v in report.user_properties if k == SPLAT_PROPERTY)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Hook, xdist controller: a worker's loose splats and missed log records."""
        output = getattr(node, "workeroutput", {})
        self._loose.extend(output.get("lbr_kernel_splats", []))
        self.missed += output.get("lbr_kmsg_missed", 0)

    # Last: a conftest's own pytest_sessionfinish may still make the kernel log a splat.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Hook: read what is left; a worker hands its loose splats to the controller, which
        fails the run (exit status 1) for each no test reported."""
        if self._log is not None:
            self._keep_loose(self._new(), running=None)
            self.missed += self._log.missed
            self.close()
        if self.is_worker:
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output["lbr_kernel_splats"] = self._loose
            output["lbr_kmsg_missed"] = self.missed
            return
        merged: dict[str, dict[str, Any]] = {}
        for splat in self._loose:  # once each, and none a test reported
            if splat["key"] not in self._reported:
                seen = merged.setdefault(splat["key"], {**splat, "running": []})
                seen["running"] += [r for r in splat["running"] if r not in seen["running"]]
        self.unreported = list(merged.values())
        if self.unreported and session.exitstatus in (0, 5):  # not over a worse one
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_report_header(self) -> list[str]:
        """Hook: why kernel splats are not watched, when asked for."""
        return [self.note] if self.note else []

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Hook: the splats outside any test, and log records missed."""
        terminal = terminalreporter
        if self.is_worker:
            return
        for splat in self.unreported:
            terminal.write_sep("=", "lbr: kernel splat outside any test", red=True)
            if splat["running"]:
                terminal.write_line(
                    "in another process while these tests ran: " + ", ".join(splat["running"])
                )
            terminal.write_line(splat["text"])
        if self.unreported:
            terminal.write_line(
                f"lbr: {len(self.unreported)} kernel splat(s) outside any test: "
                "the run fails (--lbr-kernel-splats=off turns the check off)"
            )
        if self.missed:
            terminal.write_line(
                f"lbr: the kernel overwrote its log {self.missed} time(s) before pytest "
                "read it: a kernel splat may have gone unseen"
            )

    def pytest_unconfigure(self) -> None:
        """Hook: stop reading the kernel log (the session may end before its finish)."""
        self.close()

    def close(self) -> None:
        """Stop reading the kernel log (idempotent)."""
        log, self._log = self._log, None
        if log is not None:
            log.close()


def _own_splat(splat: Splat, allowed: bool) -> bool:
    """Is the splat this xdist worker's? Its task is this process or a live child, or
    (for a test that provokes splats on purpose) one that has exited since."""
    from pytest_lbr.kernel.kmsg import is_own_task

    if splat.pid is None or splat.pid <= 0:  # no task named, or the idle task
        return False
    if is_own_task(splat.pid):
        return True
    return allowed and not os.path.exists(f"/proc/{splat.pid}")
