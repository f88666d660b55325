"""Running a planned guest and reading how it ended.

`run_vm` starts vng, echoes the guest's output (whole prefixed lines when several
run at once), kills a guest that does not boot or hangs, and returns the status
the guest side wrote: that file is the status channel, so a guest that never got
there (no boot, panic, hang) is told apart from a failing test, and `GuestError`
says which as data. `GuestResult`, `worst_status` and `unreported_splats` turn the
guests' ends into one summary; `write_guest_record` writes each end as a `guest`
record (docs/results.md), which `pytest-lbr bisect` reads instead of this runner's
messages.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from pytest_lbr.exit_codes import EXIT_CANNOT_TEST, EXIT_NO_GUEST
from pytest_lbr.guest_mode import RESULTS_FILE, SPLATS_FILE, Tally, read_noted_splats, tally_of
from pytest_lbr.kernel.kmsg import Splat, find_splats
from pytest_lbr.results import (
    GUEST_FILE,
    GuestEnd,
    GuestRecord,
    Results,
    ResultsError,
    SplatRecord,
    append_record,
    read_results,
    summary_markdown,
)
from pytest_lbr.vm.env import write_guest_env
from pytest_lbr.vm.host import strip_escapes
from pytest_lbr.vm.messages import PRINT_LOCK, VmError
from pytest_lbr.vm.plan import VmPlan

__all__ = [
    "STARTED",
    "SUMMARY_FILE",
    "STATUS",
    "GuestError",
    "GuestResult",
    "bisect_status",
    "run_vm",
    "stop_guests",
    "unreported_splats",
    "worst_status",
    "write_guest_record",
    "write_summary",
]

#: The run's Markdown summary, in the results directory (and appended to
#: $GITHUB_STEP_SUMMARY when that is set, as GitHub Actions does for a job).
SUMMARY_FILE = "summary.md"

#: Files of the results directory the guest side writes: that it started, its status.
STARTED = "started"
STATUS = "status"
#: The kernel's own last words (kernel/panic.c), as it prints them on the console.
_PANIC = re.compile(r"Kernel panic - not syncing:.*")


class GuestError(VmError):
    """A guest that never reported a status; `end` says how it ended (a `GuestRecord`
    word), `why` in one line, the message adds the console's tail."""

    def __init__(self, message: str, end: GuestEnd, why: str, console: str = "") -> None:
        super().__init__(message)
        self.end = end
        self.why = why
        #: The console text, escape codes left out ("" when there was none).
        self.console = console


class _Echo:
    """Copies what a guest prints to its console log and to stdout.

    With a prefix (several guests at once) whole lines are echoed, each prefixed,
    so guests' lines never interleave mid-line; a partial line (pytest -q's dots)
    waiting longer than `hold` seconds is echoed anyway, so progress shows.
    """

    def __init__(self, console: BinaryIO, prefix: str | None, hold: float = 5.0) -> None:
        self.console = console
        self.prefix = prefix.encode() if prefix is not None else None
        self.hold = hold
        self._partial = b""
        self._since = 0.0

    def feed(self, chunk: bytes, final: bool = False) -> None:
        """Take one chunk of output; `final` flushes a last unterminated line."""
        if chunk:
            self.console.write(chunk)
            self.console.flush()  # the log is how one follows a long run
        if self.prefix is None:
            self._write(chunk)
            return
        lines = (self._partial + chunk).splitlines(keepends=True)
        keep = b"" if not lines or lines[-1].endswith(b"\n") else lines.pop()
        if keep and not self._partial:
            self._since = time.monotonic()
        self._partial = keep
        if self._partial and (final or time.monotonic() - self._since > self.hold):
            lines.append(self._partial + b"\n")
            self._partial = b""
        self._write(b"".join(self.prefix + line for line in lines))

    def _write(self, out: bytes) -> None:
        if out:
            with PRINT_LOCK:
                sys.stdout.buffer.write(out)
                sys.stdout.flush()


def run_vm(
    plan: VmPlan,
    *,
    timeout: float = 1500.0,
    boot_timeout: float = 300.0,
    prefix: str | None = None,
) -> int:
    """Run the plan; return the guest command's exit status.

    Raises VmError (with the console tail) when the guest never reports a status:
    it did not start within `boot_timeout`, panicked, or ran past `timeout`.
    """
    plan.results.mkdir(parents=True, exist_ok=True)
    for point in plan.mount_points:
        try:
            point.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = (
                f"cannot make the mount point {point} in the guest root: {exc.strerror} "
                "(run as the root's owner, or make it once with mkdir -p)"
            )
            raise GuestError(why, "not_started", why) from None
    # A previous run's ends and records must not pass for this run's.
    for name in (STARTED, STATUS, SPLATS_FILE, GUEST_FILE, RESULTS_FILE):
        (plan.results / name).unlink(missing_ok=True)
    write_guest_env(plan.results, plan.env)
    console_path = plan.results / "console.log"
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    start = time.monotonic()
    with open(console_path, "wb") as console:
        proc = subprocess.Popen(
            plan.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        echo = _Echo(console, prefix)
        why = ""
        end: GuestEnd = "died"
        _guests.add(proc.pid)
        try:
            while True:
                echo.feed(proc.stdout.read() or b"")
                if proc.poll() is not None:
                    echo.feed(proc.stdout.read() or b"", final=True)
                    break
                elapsed = time.monotonic() - start
                if elapsed > boot_timeout and not (plan.results / STARTED).exists():
                    why, end = f"guest did not boot within {boot_timeout:.0f}s", "no_boot"
                elif elapsed > timeout:
                    why, end = f"guest ran past the {timeout:.0f}s limit (hang?)", "hang"
                if why:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    echo.feed(b"", final=True)
                    break
                time.sleep(0.2)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing else stops it
            raise
        finally:
            _guests.discard(proc.pid)
    status_file = plan.results / STATUS
    if status_file.exists():
        return int(status_file.read_text().strip() or EXIT_NO_GUEST)
    if not why:
        started = (plan.results / STARTED).exists()
        end = "died" if started else "no_boot"
        why = f"guest exited (vng status {proc.returncode}) without reporting a status: " + (
            "it panicked or was killed mid-run" if started else "it failed to boot"
        )
    # Quoted in a message: the console's escape codes (firmware, kernel) left out.
    text = strip_escapes(console_path.read_bytes().decode(errors="replace"))
    tail = text.strip().splitlines()[-15:]
    hint = (
        ""
        if "--verbose" in plan.command
        else " (rerun with --kernel-log to see the kernel console)"
    )
    raise GuestError(
        f"{plan.label}: {why}; console in {console_path}{hint}:\n  " + "\n  ".join(tail),
        end,
        why,
        text,
    )


#: Process groups of the guests running now. Each runs in its own session, so Ctrl-C
#: (or a stopped `pytest-lbr bisect`) reaches only this process, which must stop them.
_guests: set[int] = set()


def stop_guests() -> None:
    """Kill every guest still running (on Ctrl-C)."""
    for group in list(_guests):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class GuestResult:
    """How one kernel's guest ended."""

    label: str
    status: int
    results: Path
    #: The results file the guest's pytest wrote, read once (None: none, or --exec).
    records: Results | None = None
    error: str = ""
    #: Why the guest failed though its command passed (a kernel splat pytest did not see).
    note: str = ""
    #: Kernel splats in the guest's log that its pytest did not report.
    splats: list[Splat] = field(default_factory=list)
    #: How it ended, as written for machines (`write_guest_record`).
    record: GuestRecord | None = None

    @property
    def tally(self) -> Tally | None:
        """The counts of the guest's results file (None without one)."""
        return None if self.records is None else tally_of(self.records)

    def line(self) -> str:
        """One summary line: counts, and the exit status."""
        if self.error:
            return f"{self.label}: no result: {self.error.splitlines()[0]} (exit {self.status})"
        note = f"; {self.note}" if self.note else ""
        if self.tally is None:
            return f"{self.label}: exit {self.status} (results in {self.results}){note}"
        t = self.tally
        # Both counts say what they count: a suite whose tests use the `lbr` fixture
        # without the kernel marker traced, though no kernel-marked test ran.
        return (
            f"{self.label}: {t.passed} passed, {t.failed} failed, {t.skipped} skipped; "
            f"ran with tracing: {t.traced}, ran marked kernel: {t.kernel_ran} "
            f"(exit {self.status}; results in {self.results})" + note
        )


#: From best to worst: a run's status is its worst guest's.
_SEVERITY = [0, 5, 1, 2, 4, 3]


def worst_status(statuses: Sequence[int]) -> int:
    """The status that says most: any failure beats success, a missing guest beats all."""
    if not statuses:
        return EXIT_NO_GUEST

    def rank(status: int) -> int:
        return _SEVERITY.index(status) if status in _SEVERITY else len(_SEVERITY)

    return max(statuses, key=rank)


def unreported_splats(results: Path) -> list[Splat]:
    """Kernel splats in a guest's saved kernel log (dmesg.txt) its pytest did not report:
    at boot, before or after the session, or in a command run with --exec."""
    try:
        text = (results / "dmesg.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    noted = read_noted_splats(results)
    return [splat for splat in find_splats(text.splitlines()) if splat.key not in noted]


def bisect_status(status: int) -> int:
    """`git bisect run`'s view of a status: 0 good, 1 bad, anything else 125 (skip)."""
    return status if status in (0, 1) else EXIT_CANNOT_TEST


def read_guest_results(results: Path) -> Results | None:
    """The results file a guest's pytest wrote into `results` (None: none, or unreadable)."""
    try:
        return read_results(results / RESULTS_FILE)
    except (OSError, ResultsError):
        return None


def console_end(console: str) -> tuple[str, list[Splat]]:
    """The kernel panic line and the splats on a guest's console (text, escapes left out)."""
    panic = _PANIC.search(console)
    return (panic.group(0).strip() if panic else ""), find_splats(console.splitlines())


def write_guest_record(
    guest: GuestResult, kernel: str, end: GuestEnd, error: str = "", console: str = ""
) -> GuestRecord:
    """Write how `guest` ended as the `guest` record of its results directory
    (`GUEST_FILE`, replaced), keep it in `guest.record` and return it: its status, the
    runner's one-line `error`, a kernel panic or splat on the `console` of a guest that
    never reported."""
    panic, on_console = console_end(console) if end != "reported" else ("", [])
    splats = guest.splats if end == "reported" else on_console
    started = guest.results / STARTED
    release = started.read_text().strip() if started.exists() else ""
    record = GuestRecord(
        guest.label,
        kernel,
        end,
        status=guest.status if end == "reported" else None,
        exit_status=guest.status,
        error=error,
        panic=panic,
        splats=[SplatRecord(s.key, s.summary) for s in splats],
        release=release,
    )
    if guest.results.is_dir():
        (guest.results / GUEST_FILE).unlink(missing_ok=True)
        append_record(guest.results / GUEST_FILE, record)
    guest.record = record
    return record


def write_summary(root: Path, guests: Sequence[GuestResult], more: Sequence[str] = ()) -> Path:
    """Write `root/summary.md` from each guest's results (and the kernel splats the
    runner found in its log), then the Markdown lines `more` (coverage); append it
    to $GITHUB_STEP_SUMMARY when that is set."""
    runs: dict[str, Results | None] = {}
    for guest in guests:
        res = guest.records or Results()
        runner = [SplatRecord(s.key, s.summary) for s in guest.splats]
        runs[guest.label] = replace(res, splats=res.splats + runner, guest=guest.record)
    text = summary_markdown(runs)
    if more:
        text += "\n".join(more).rstrip() + "\n"
    path = root / SUMMARY_FILE
    path.write_text(text, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as out:
            out.write(text)
    return path
