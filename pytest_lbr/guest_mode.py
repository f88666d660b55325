"""Kernel tests and the guests that run them: markers, strict mode, shards, the tally.

A test marked `kernel` needs root and a tracing kernel. Outside a `pytest-lbr vm`
guest it is skipped with the command that runs it (unless `--lbr-run-kernel-tests`
says this machine is the test kernel). Inside a guest (the runner sets
`PYTEST_LBR_GUEST=1`) a skipped kernel test fails unless it is marked
`allow_skip`: a guest that cannot trace must never pass quietly (drgn's vmtest
does the same). `lbr_strict = false` (or `pytest-lbr vm --no-strict`) turns that off.

The tally the VM runner prints per kernel (passed/failed/skipped, how many tests ran
with tracing and how many kernel tests ran) is counted from the results file the
guest's pytest writes (`<results>/results.jsonl`, docs/results.md). The plugin also
writes the kernel splats it saw (`<results>/kernel-splats.txt`), so that the runner
fails a guest only for a splat in its kernel log that pytest did not report.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_lbr.results import Results

__all__ = [
    "ALLOW_SKIP_MARKER",
    "ENV_GUEST",
    "ENV_RESULTS",
    "ENV_STRICT",
    "KERNEL_MARKER",
    "RESULTS_FILE",
    "SPLATS_FILE",
    "TRACING_PROPERTY",
    "Shard",
    "Tally",
    "enforce_strict",
    "host_skip_reason",
    "in_guest",
    "note_splats",
    "read_noted_splats",
    "read_tally",
    "select",
    "strict",
    "strict_failure",
    "tally_of",
]

#: Set to "1" by the VM runner inside the guest.
ENV_GUEST = "PYTEST_LBR_GUEST"
#: "0" turns strict mode off inside the guest (`pytest-lbr vm --no-strict`).
ENV_STRICT = "PYTEST_LBR_STRICT"
#: The guest's results directory (the results file and the noted splats go there).
ENV_RESULTS = "PYTEST_LBR_RESULTS"
#: The results file the guest's pytest writes into its results directory.
RESULTS_FILE = "results.jsonl"
#: The user property the `lbr` fixture puts on a test's reports: the backend that
#: traced it, or "unavailable".
TRACING_PROPERTY = "lbr_tracing"
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
        """Round robin over positions: every runner gets a similar mix."""
        return position % self.count == self.index - 1

    def of(self, nodeids: list[str]) -> list[bool]:
        """Which of the tests `nodeids` (in collection order) this runner keeps: round
        robin over their sorted node ids, not over collection order, which a plugin
        that shuffles (pytest-randomly, with each runner's own seed) makes differ from
        runner to runner, so shards would overlap and miss tests."""
        rank = {n: r for r, n in enumerate(sorted(nodeids))}
        return [self.keeps(rank[n]) for n in nodeids]

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
        mine = shard.of([item.nodeid for item in items])
        kept = [item for item, keep in zip(items, mine, strict=True) if keep]
        dropped = [item for item, keep in zip(items, mine, strict=True) if not keep]
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
    """The tally of the results file a guest wrote into `results`, each test once (its
    worst phase); None when it wrote none or an unreadable one."""
    from pytest_lbr.results import ResultsError, read_results

    try:
        return tally_of(read_results(results / RESULTS_FILE))
    except (OSError, ResultsError):
        return None


def tally_of(res: Results) -> Tally:
    """The tally of a results file already read."""
    t = Tally(res.count("passed"), res.count("failed") + res.count("error"), res.count("skipped"))
    for test in res.tests:
        if test.kernel:
            if test.outcome == "skipped":
                t.kernel_skipped += 1
            else:
                t.kernel_ran += 1
    t.traced = res.traced
    return t
