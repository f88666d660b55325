"""Kernel tests and the guests that run them: markers, strict mode, shards, the tally.

A test marked `kernel` needs root and a tracing kernel. Outside a `pytest-lbr vm`
guest it is skipped with the command that runs it (unless `--lbr-run-kernel-tests`
says this machine is the test kernel). Inside a guest (the runner sets
`PYTEST_LBR_GUEST=1`) a skipped kernel test fails unless it is marked
`allow_skip`: a guest that cannot trace must never pass quietly (drgn's vmtest
does the same). `lbr_strict = false` (or `pytest-lbr vm --no-strict`) turns that off.

The plugin also writes the tally the VM runner prints per kernel
(`<results>/tally.json`: passed/failed/skipped, how many tests ran with tracing
and how many kernel tests ran),
counted from the reports themselves so it holds under xdist too, and the kernel
splats it saw (`<results>/kernel-splats.txt`), so that the runner fails a guest
only for a splat in its kernel log that pytest did not report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ALLOW_SKIP_MARKER",
    "ENV_GUEST",
    "ENV_RESULTS",
    "ENV_STRICT",
    "KERNEL_MARKER",
    "SPLATS_FILE",
    "TALLY_FILE",
    "TRACING_PROPERTY",
    "Shard",
    "Tally",
    "TallyCounter",
    "enforce_strict",
    "host_skip_reason",
    "in_guest",
    "note_splats",
    "read_noted_splats",
    "read_tally",
    "select",
    "strict",
    "strict_failure",
]

#: Set to "1" by the VM runner inside the guest.
ENV_GUEST = "PYTEST_LBR_GUEST"
#: "0" turns strict mode off inside the guest (`pytest-lbr vm --no-strict`).
ENV_STRICT = "PYTEST_LBR_STRICT"
#: The guest's results directory (the tally goes there).
ENV_RESULTS = "PYTEST_LBR_RESULTS"
TALLY_FILE = "tally.json"
#: The user property the `lbr` fixture puts on a test's reports: the backend that
#: traced it, or "unavailable".
TRACING_PROPERTY = "lbr_tracing"
#: The pid of the pytest process that writes the tally (set by the first one).
ENV_TALLY_OWNER = "PYTEST_LBR_TALLY_OWNER"
#: The kernel splats the guest's pytest saw, one `Splat.key` a line: the VM runner
#: fails a guest whose kernel log holds any other.
SPLATS_FILE = "kernel-splats.txt"

KERNEL_MARKER = "kernel: needs root and a tracing kernel; runs inside `pytest-lbr vm` guests"
ALLOW_SKIP_MARKER = (
    "allow_skip: a kernel test that may skip inside a guest (a capability one kernel lacks)"
)


def in_guest() -> bool:
    """Is this process inside a `pytest-lbr vm` guest?"""
    return os.environ.get(ENV_GUEST) == "1"


def strict(ini_strict: bool) -> bool:
    """Strict mode: in a guest, on unless the ini key or the runner turned it off."""
    return in_guest() and ini_strict and os.environ.get(ENV_STRICT, "1") != "0"


def host_skip_reason() -> str:
    """Why a kernel test does not run here, with the command that runs it."""
    return (
        "kernel test: needs root and a tracing kernel; run it in a guest "
        "(pytest-lbr vm --kernel 6.12 -- PYTEST ARGS) or pass --lbr-run-kernel-tests"
    )


def strict_failure(reason: object) -> str:
    """The failure text that replaces a kernel test's skip inside a guest."""
    if isinstance(reason, tuple) and len(reason) == 3:
        reason = reason[2]
    return (
        f"kernel test skipped inside the guest: {reason} "
        "(mark it allow_skip if this kernel may lack it; --no-strict turns this off)"
    )


@dataclass(frozen=True)
class Shard:
    """`I/N`: this runner's share of the suite (1-based), for a CI matrix of N runners."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """'2/4' -> Shard(2, 4); ValueError with the expected form otherwise."""
        try:
            i, n = (int(part) for part in text.split("/"))
        except ValueError:
            raise ValueError(f"--shard {text!r}: expected I/N, e.g. 1/4") from None
        if not 1 <= i <= n:
            raise ValueError(f"--shard {text!r}: I must be between 1 and N")
        return cls(i, n)

    def keeps(self, position: int) -> bool:
        """Round robin over collection order: every runner gets a similar mix."""
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass
class Tally:
    """Outcomes of one run, one per test (its worst phase)."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    kernel_ran: int = 0
    """Kernel tests that ran (passed or failed), not skipped."""
    kernel_skipped: int = 0
    traced: int = 0
    """Tests that ran (passed or failed) with tracing: the `lbr` fixture handed them a
    tracer, whether or not they are marked `kernel`."""


def select(config: Any, items: list[Any]) -> None:
    """Collection: skip kernel tests outside a guest; keep only this runner's shard."""
    import pytest

    shard_text = config.getoption("lbr_shard")
    if shard_text:
        try:
            shard = Shard.parse(shard_text)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        kept = [item for i, item in enumerate(items) if shard.keeps(i)]
        dropped = [item for i, item in enumerate(items) if not shard.keeps(i)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if in_guest() or config.getoption("lbr_run_kernel_tests"):
        return
    skip = pytest.mark.skip(reason=host_skip_reason())
    for item in items:
        if item.get_closest_marker("kernel"):
            item.add_marker(skip)


def enforce_strict(item: Any, report: Any) -> None:
    """Make report (a kernel test's skip inside a guest) a failure, unless allow_skip."""
    if not report.skipped or hasattr(report, "wasxfail"):  # an xfail is a known failure
        return
    if item.get_closest_marker("kernel") is None or item.get_closest_marker("allow_skip"):
        return
    if strict(bool(item.config.getini("lbr_strict"))):
        report.outcome = "failed"
        report.longrepr = strict_failure(report.longrepr)


class TallyCounter:
    """Collects test reports (on the xdist controller too) into a Tally; a pytest plugin."""

    _RANK = {"passed": 0, "skipped": 1, "failed": 2}
    #: The counter that writes the tally in this process (the outermost session's).
    _owner: TallyCounter | None = None

    def __init__(self) -> None:
        self._outcome: dict[str, str] = {}
        self._kernel: set[str] = set()
        self._traced: set[str] = set()
        # Only the guest's outermost session writes: the pytest sessions its tests
        # start (pytester, in this process or a child) inherit ENV_TALLY_OWNER and
        # would otherwise write their own counts over the run's while it goes on.
        owner = os.environ.setdefault(ENV_TALLY_OWNER, str(os.getpid()))
        self._writes = owner == str(os.getpid()) and TallyCounter._owner is None
        if self._writes:
            TallyCounter._owner = self

    def add(self, report: Any) -> None:
        """Fold one phase's report in: a test counts as its worst phase."""
        old = self._outcome.get(report.nodeid)
        if old is None or self._RANK[report.outcome] > self._RANK[old]:
            self._outcome[report.nodeid] = report.outcome
        if "kernel" in report.keywords:
            self._kernel.add(report.nodeid)
        # The property the `lbr` fixture sets (session.py), carried by the report
        # to the xdist controller too.
        if any(k == TRACING_PROPERTY and v != "unavailable" for k, v in report.user_properties):
            self._traced.add(report.nodeid)

    def tally(self) -> Tally:
        t = Tally()
        for nodeid, outcome in self._outcome.items():
            setattr(t, outcome, getattr(t, outcome) + 1)
            if nodeid in self._kernel:
                if outcome == "skipped":
                    t.kernel_skipped += 1
                else:
                    t.kernel_ran += 1
            if nodeid in self._traced and outcome != "skipped":
                t.traced += 1
        return t

    def write(self, results: Path) -> None:
        """Write `tally.json` into `results`."""
        (results / TALLY_FILE).write_text(json.dumps(asdict(self.tally())) + "\n")

    # pytest hooks (registered by the plugin)
    def pytest_runtest_logreport(self, report: Any) -> None:
        self.add(report)

    def pytest_sessionfinish(self, session: Any) -> None:
        results = os.environ.get(ENV_RESULTS)
        if not self._writes:
            return
        TallyCounter._owner = None
        if in_guest() and results and not hasattr(session.config, "workerinput"):
            self.write(Path(results))


def note_splats(keys: Iterable[str]) -> None:
    """Inside a guest: add the keys of kernel splats pytest saw to `SPLATS_FILE`."""
    results = os.environ.get(ENV_RESULTS)
    if in_guest() and results:
        with open(Path(results) / SPLATS_FILE, "a", encoding="utf-8") as out:
            out.writelines(f"{key}\n" for key in keys)  # appended: every process of the run adds


def read_noted_splats(results: Path) -> set[str]:
    """The keys `note_splats` wrote into `results` (none when it wrote nothing)."""
    try:
        return set((results / SPLATS_FILE).read_text(encoding="utf-8").splitlines())
    except OSError:
        return set()


def read_tally(results: Path) -> Tally | None:
    """The tally a guest wrote, or None when it wrote none (or a damaged one)."""
    try:
        data = json.loads((results / TALLY_FILE).read_text())
        return Tally(**{k: int(v) for k, v in data.items()})
    except (OSError, ValueError, TypeError):
        return None
