"""The golden workflow for one trace: find its file, then update it or compare with it.

`GoldenCheck.run` does everything but fail the test: it returns a `GoldenResult`
that the pytest session turns into a pass or a one-line failure and the report
shows. No pytest here, so the workflow can run (and be tested) without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pytest_lbr.golden.compare import compare
from pytest_lbr.golden.format import GoldenError, GoldenFile, parse, serialize
from pytest_lbr.golden.normalize import Normalization, normalize
from pytest_lbr.golden.storage import (
    display_path,
    golden_candidates,
    write_atomic,
)
from pytest_lbr.model import Trace

__all__ = ["PASSING", "GoldenCheck", "GoldenResult", "GoldenStatus"]

GoldenStatus = Literal["match", "written", "unchanged", "missing", "mismatch", "error"]
#: The statuses that let the test pass.
PASSING: frozenset[GoldenStatus] = frozenset({"match", "written", "unchanged"})


@dataclass(frozen=True)
class GoldenResult:
    """How one golden check went."""

    #: The test's golden name (node id after the module, `.name` appended).
    name: str
    #: The golden file read or written: the series variant if there is one.
    path: Path
    level: str
    status: GoldenStatus
    #: Why the test fails, as it is shown; empty when it passes.
    message: str = ""
    #: Edge lines of the golden file (if it could be read) and of this trace.
    expected: tuple[str, ...] = ()
    actual: tuple[str, ...] = ()
    #: The unified diff of a mismatch ("" otherwise).
    diff: str = ""
    #: The kernel release the golden file was recorded on ("" where unknown) and the
    #: one this trace ran on: a mismatch across releases may be the kernel's doing.
    recorded_release: str = ""
    running_release: str = ""

    @property
    def passed(self) -> bool:
        """Whether the test passes this check."""
        return self.status in PASSING


@dataclass(frozen=True)
class GoldenCheck:
    """Golden checks for the tests of one module, with one normalisation.

    `update` (--lbr-golden-update) writes new and changed files instead of comparing.
    """

    module_path: Path
    normalization: Normalization = field(default_factory=Normalization)
    update: bool = False

    def run(self, trace: Trace, name: str, level: str = "function") -> GoldenResult:
        """Check `trace` against the golden file of test `name` (or write it)."""
        release = trace.kernel_release or os.uname().release
        arch = trace.arch
        expected: tuple[str, ...] = ()
        actual: tuple[str, ...] = ()
        # Another architecture's files do not count: take the most specific file
        # recorded on this one; where the others' files are, record beside them.
        candidates, own = golden_candidates(self.module_path, name, release, arch)
        existing = [c for c in candidates if c.exists()]
        foreign = [c for c in existing if _recorded_on(c) not in (arch, None)]
        mine = [c for c in existing if c not in foreign]
        # Where to record when nothing here is this architecture's: the plain name
        # (the last candidate), or beside another architecture's files.
        default = own if foreign else candidates[-1]
        path = mine[0] if mine else default
        shown = display_path(path)

        def result(status: GoldenStatus, message: str = "", diff: str = "") -> GoldenResult:
            # The edge lines as far as they were known when the check ended.
            recorded = old.header.get("kernel", "") if old is not None else ""
            return GoldenResult(
                name, path, level, status, message, expected, actual, diff, recorded, release
            )

        old: GoldenFile | None = None
        if trace.lost:
            return result(
                "error", f"trace lost {trace.lost} records: a golden comparison would be unreliable"
            )
        actual = tuple(normalize(trace, level, self.normalization))
        problem = ""
        try:
            old = parse(path.read_bytes(), shown) if path.exists() else None
        except GoldenError as e:
            problem = str(e)
        if problem and not self.update:
            return result("error", f"unusable golden trace: {problem}")
        if old is not None:
            expected = tuple(old.lines)
        if self.update:
            if (
                old is not None
                and expected == actual
                and old.level == level
                and old.backend == trace.backend
            ):
                return result("unchanged")
            write_atomic(path, serialize(trace, actual, level))
            return result("written")
        if old is None:
            return result(
                "missing",
                f"no golden trace {display_path(default)}: run with --lbr-golden-update to record it",
            )
        if old.level != level:
            return result(
                "error",
                f"{shown} was recorded at level {old.level!r}, checked at {level!r}: re-record it",
            )
        try:
            cmp = compare(trace, old, Path(shown), list(actual))
        except GoldenError as e:
            problem = str(e)
        if problem:
            return result("error", f"unusable golden trace: {problem}")
        if cmp.matches:
            return result("match")
        diff = cmp.diff()
        recorded = old.header.get("kernel", "")
        # A stable kernel update takes other paths too: the first line says so.
        drift = (
            f" (recorded on {recorded}, running {release}: the kernel changed too)"
            if recorded and recorded != release
            else ""
        )
        return result(
            "mismatch",
            f"golden trace mismatch: {shown}{drift}\n{cmp.first_divergence()}\n{diff}\n"
            "(if the new path is right: pytest --lbr --lbr-golden-update)",
            diff,
        )


def _recorded_on(path: Path) -> str | None:
    """The architecture a golden file's header names (None: unreadable, or none given)."""
    try:
        return parse(path.read_bytes(), str(path)).header.get("arch")
    except (OSError, GoldenError):
        return None  # the check itself reads it again and says what is wrong
