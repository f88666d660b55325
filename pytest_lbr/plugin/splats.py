"""`KernelSplats`: a pytest session's watch on the kernel log (`--lbr-kernel-splats`).

A kernel splat (oops, WARNING, BUG, lockdep report...) during a test fails it,
unless the test is marked `allow_splat`; one outside any test fails the run.
Under pytest-xdist each worker watches the log and takes the splats of its own
tasks; the rest go to the controller as plain data, which fails the run with each
once, naming the tests that were running. `LbrSession` holds one and hands the
pytest hooks to it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.guest_mode import note_splats
from pytest_lbr.report.record import TestRecord

if TYPE_CHECKING:
    from pytest_lbr.kernel.kmsg import KernelLog, Splat

__all__ = ["SPLAT_PROPERTY", "KernelSplats"]

#: The user property naming each kernel splat a test reported (its `Splat.key`).
SPLAT_PROPERTY = "lbr_kernel_splat"


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

    def between_tests(self) -> None:
        """Before a test: what the kernel logged since the last one belongs to no test."""
        if self._log is not None:
            self._keep_loose(self._new(), running=None)

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

    def note_report(self, report: pytest.TestReport) -> None:
        """Any process, the xdist controller too: the splats a test's report names."""
        self._reported.update(str(v) for k, v in report.user_properties if k == SPLAT_PROPERTY)

    def worker_done(self, output: dict[str, Any]) -> None:
        """xdist controller: a worker's loose splats and missed log records."""
        self._loose.extend(output.get("lbr_kernel_splats", []))
        self.missed += output.get("lbr_kmsg_missed", 0)

    def finish(self, session: pytest.Session) -> None:
        """Read what is left; a worker hands its loose splats to the controller, which
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

    def summary(self, terminal: Any) -> None:
        """Terminal summary: the splats outside any test, and log records missed."""
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
