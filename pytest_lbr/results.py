"""The results file: one JSON record per test, for machines (docs/results.md).

`--lbr-results=FILE` writes JSON Lines: one ``test`` record per test as its report comes
in, then, when the session ends, a ``session`` record (kernel, architecture, backend,
whether tracing could run) and a ``splat`` record for each kernel splat no test
reported. `pytest-lbr vm` adds a ``guest`` record per kernel in its own file (how the
guest ended: its status, the runner's error, a kernel panic on the console).
`pytest-lbr vm`, `pytest-lbr bisect` and the CI summary decide on these records, never on
failure text: rewording a message changes no verdict.

Plain data and I/O only: no pytest. The plugin builds the records (`plugin/results_writer.py`), the VM
runner its guest records (`vm/run.py`); this module writes, reads and summarises them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from pytest_lbr.errors import UserError

__all__ = [
    "SCHEMA",
    "VERSION",
    "GUEST_FILE",
    "CoverageRecord",
    "GoldenRecord",
    "GuestRecord",
    "Results",
    "ResultsError",
    "SessionRecord",
    "SplatRecord",
    "TestResult",
    "TraceRecord",
    "append_record",
    "guest_record",
    "golden_outcome",
    "read_results",
    "summary_markdown",
]

#: Every record names its schema and version; readers refuse other versions in one line.
SCHEMA = "pytest-lbr/results"
VERSION = 1
#: The file of `guest` records `pytest-lbr vm` writes into each kernel's results directory.
GUEST_FILE = "guest.jsonl"

Outcome = Literal["passed", "failed", "skipped", "error"]
#: How a guest ended (`GuestRecord.end`).
GuestEnd = Literal["reported", "no_boot", "hang", "died", "not_started"]
#: A golden check as the results file says it (`golden_outcome` maps the checker's words).
GoldenOutcome = Literal["matched", "mismatched", "written", "unchanged", "missing", "error"]
_GOLDEN_OUTCOMES: dict[str, GoldenOutcome] = {
    "match": "matched",
    "mismatch": "mismatched",
    "written": "written",
    "unchanged": "unchanged",
    "missing": "missing",
    "error": "error",
}


_R = TypeVar("_R")


class ResultsError(UserError, ValueError):
    """A results file that cannot be read; the message names the file and the line."""


def golden_outcome(status: str) -> GoldenOutcome:
    """The results file's word for a `GoldenResult.status`."""
    return _GOLDEN_OUTCOMES[status]


@dataclass(frozen=True)
class TraceRecord:
    """One `lbr.trace(...)` of a test: what it traced and how much it got."""

    targets: list[str]
    backend: str
    hits: int
    lost: int
    notes: list[str] = field(default_factory=list)
    #: Hits that carry the target's return value.
    returns: int = 0


@dataclass(frozen=True)
class GoldenRecord:
    """One golden check of a test."""

    name: str
    #: The golden file read or written, as shown to the user (relative where it can be).
    file: str
    status: GoldenOutcome
    level: str = "function"
    #: The unified diff of a mismatch ("" otherwise).
    diff: str = ""
    #: The kernel release the golden file was recorded on ("" where it does not say).
    recorded_release: str = ""
    #: The kernel release this run traced.
    running_release: str = ""


@dataclass(frozen=True)
class SplatRecord:
    """A kernel splat (WARNING, BUG, Oops, ...) seen while the run was going."""

    key: str
    title: str
    #: The test it happened in; "" for a splat no test reported.
    nodeid: str = ""
    #: The test is marked `allow_splat`: it provokes splats on purpose, and this one
    #: failed nothing.
    allowed: bool = False


@dataclass(frozen=True)
class SessionRecord:
    """What the whole session ran on."""

    kernel_release: str
    arch: str
    #: The backend tests trace with ("" where tracing was not enabled).
    backend: str = ""
    #: Whether tracing could run in this session, and if not, why.
    tracing: bool = False
    reason: str = ""
    in_guest: bool = False


@dataclass(frozen=True)
class TestResult:
    """One test: its outcome, what it traced, its golden checks and its splats."""

    __test__ = False  # a record, not a pytest test class

    nodeid: str
    outcome: Outcome
    #: Why it was skipped or failed, in one line ("" when it passed).
    reason: str = ""
    duration_s: float = 0.0
    #: True for a `kernel` test whose skip a guest turned into a failure (strict mode).
    skip_became_failure: bool = False
    traces: list[TraceRecord] = field(default_factory=list)
    golden: list[GoldenRecord] = field(default_factory=list)
    splats: list[SplatRecord] = field(default_factory=list)
    #: Marked `kernel` (runs only in guests, or with --lbr-run-kernel-tests).
    kernel: bool = False
    #: The `lbr` fixture handed it a tracer (whether or not it armed a trace).
    tracer: bool = False
    #: What the test recorded with pytest's `record_property` (values as text).
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def traced(self) -> bool:
        """Whether the test ran with tracing: it armed a trace or got a tracer."""
        return self.outcome != "skipped" and (self.tracer or bool(self.traces))


@dataclass(frozen=True)
class GuestRecord:
    """How one kernel's guest of a `pytest-lbr vm` run ended; the runner writes it into
    the kernel's results directory (`GUEST_FILE`) whether or not the guest booted."""

    #: The kernel's name in the run (`6.12`, or the image's file name).
    label: str
    #: The image or kernel tree booted ("" when the runner never found one).
    kernel: str
    #: `reported`: the guest wrote its command's exit status; `no_boot`: it never
    #: started; `hang`: it ran past --timeout; `died`: it started but never reported
    #: (a panic, a kill); `not_started`: the runner could not start it.
    end: GuestEnd
    #: The guest command's exit status (pytest's), when the guest reported one.
    status: int | None = None
    #: What `pytest-lbr vm` counts for this kernel (`status`, made 1 by a kernel splat
    #: no test reported; 6 when the guest never reported).
    exit_status: int = 6
    #: Why there is no status, in one line ("" when there is one).
    error: str = ""
    #: The kernel's "Kernel panic - not syncing: ..." line on the console ("" if none).
    panic: str = ""
    #: Kernel splats no test reported: from the guest's saved log, or from the console
    #: of a guest that died before saving it.
    splats: list[SplatRecord] = field(default_factory=list)
    #: The kernel release the guest booted (`uname -r` there; "" if it never started).
    release: str = ""


@dataclass
class Results:
    """A results file as read back."""

    session: SessionRecord | None = None
    tests: list[TestResult] = field(default_factory=list)
    #: Splats no test reported: they fail the run.
    splats: list[SplatRecord] = field(default_factory=list)
    #: One per BPF program traced under --lbr-cov.
    coverage: list[CoverageRecord] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        """How many tests ended with `outcome`."""
        return sum(t.outcome == outcome for t in self.tests)

    @property
    def traced(self) -> int:
        """How many tests ran with tracing (`TestResult.traced`)."""
        return sum(t.traced for t in self.tests)

    #: How the guest ended, for a file `pytest-lbr vm` wrote (`GUEST_FILE`).
    guest: GuestRecord | None = None

    def failing_splats(self) -> list[SplatRecord]:
        """The kernel splats that fail the run: every one no test allowed."""
        return [s for s in self.splats + [s for t in self.tests for s in t.splats] if not s.allowed]

    def allowed_splats(self) -> list[SplatRecord]:
        """The splats tests marked `allow_splat` provoked: shown, never failures."""
        return [s for t in self.tests for s in t.splats if s.allowed]

    def mismatches(self) -> list[tuple[str, GoldenRecord]]:
        """(node id, check) of every golden mismatch, in test order."""
        return [(t.nodeid, g) for t in self.tests for g in t.golden if g.status == "mismatched"]


def _record(kind: str, data: Any) -> str:
    return json.dumps({"schema": SCHEMA, "version": VERSION, "type": kind, **asdict(data)})


@dataclass
class CoverageRecord:
    """One BPF program's coverage over the session (`--lbr-cov`; docs/results.md)."""

    program: str
    source: str
    tags: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    runs: int = 0
    cut_by_window: int = 0
    #: [file, line, runs that showed it ran, "executed" | "proven" | "counted" | ""].
    lines: list[list[Any]] = field(default_factory=list)
    #: [file, line, jump number on the line, runs it was taken, runs it fell through].
    branches: list[list[Any]] = field(default_factory=list)
    #: Runs (or passes through its code) whose records do not show every direction of
    #: its jumps (graph runs; LBR runs cut by the window or filtered). None: a record
    #: from before the field, read as "every run" (no direction is claimed never taken).
    unknown_direction_runs: int | None = None
    #: Exact mode: runs of blocks with no line of their own (code the compiler merged
    #: from several lines): while above 0, a line counted 0 may have run that way.
    unattributed_runs: int = 0
    #: [name, file, line that declares it, its first line with code] per function
    #: (main first, subprograms, callbacks).
    functions: list[list[Any]] = field(default_factory=list)
    #: Test node id ("" outside a test) -> its runs: {backends, runs, cut_by_window,
    #: unknown_direction_runs, lines, branches} with only the lines and branches its
    #: runs showed. None: a record from before the field (one context, unnamed).
    contexts: dict[str, dict[str, Any]] | None = None


_KINDS: dict[type, str] = {
    CoverageRecord: "coverage",
    SessionRecord: "session",
    TestResult: "test",
    SplatRecord: "splat",
    GuestRecord: "guest",
}


def append_record(
    path: Path, record: SessionRecord | TestResult | SplatRecord | GuestRecord | CoverageRecord
) -> None:
    """Append one record as a line (created with its directory if missing)."""
    kind = _KINDS[type(record)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(_record(kind, record) + "\n")


def read_results(path: Path) -> Results:
    """Read a results file; a line of another schema or version, or not JSON, is a
    `ResultsError` naming the file and line (a run cut short may end in a partial
    line: that last line alone is ignored)."""
    results = Results()
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the writer was killed mid-line
            raise ResultsError(f"{path}:{number}: not a JSON record") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ResultsError(f"{path}:{number}: not a pytest-lbr results record")
        if data.get("version") != VERSION:
            raise ResultsError(
                f"{path}:{number}: results version {data.get('version')!r}, this pytest-lbr "
                f"reads version {VERSION}: read it with the pytest-lbr that wrote it"
            )
        kind = data.pop("type", None)
        for key in ("schema", "version"):
            data.pop(key)
        try:
            if kind == "session":
                results.session = _make(SessionRecord, data)
            elif kind == "test":
                results.tests.append(_test_record(data))
            elif kind == "splat":
                results.splats.append(_make(SplatRecord, data))
            elif kind == "guest":
                results.guest = _guest_record(data)
            elif kind == "coverage":
                results.coverage.append(_make(CoverageRecord, data))
            else:
                raise ResultsError(f"{path}:{number}: unknown record type {kind!r}")
        except TypeError as exc:
            raise ResultsError(f"{path}:{number}: malformed {kind} record ({exc})") from None
    return results


def _make(cls: type[_R], data: dict[str, Any]) -> _R:
    """`cls` from a record's fields; fields this version does not know are left out
    (a newer pytest-lbr may add fields within a version, never change one)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def _test_record(data: dict[str, Any]) -> TestResult:
    data["traces"] = [_make(TraceRecord, t) for t in data.get("traces", [])]
    data["golden"] = [_make(GoldenRecord, g) for g in data.get("golden", [])]
    data["splats"] = [_make(SplatRecord, s) for s in data.get("splats", [])]
    return _make(TestResult, data)


def _guest_record(data: dict[str, Any]) -> GuestRecord:
    data["splats"] = [_make(SplatRecord, s) for s in data.get("splats", [])]
    return _make(GuestRecord, data)


def guest_record(directory: Path) -> GuestRecord | None:
    """The guest record `pytest-lbr vm` wrote into a kernel's results directory (None:
    none, or not readable)."""
    try:
        return read_results(directory / GUEST_FILE).guest
    except (OSError, ResultsError):
        return None


# -- the CI summary -------------------------------------------------------------------


def summary_markdown(runs: Mapping[str, Results | None]) -> str:
    """The Markdown summary of one `pytest-lbr vm` run: per kernel, its counts, each
    failure (with its golden diff), the kernel splats and the skips that became
    failures. Splats that tests marked `allow_splat` provoked are counted and listed
    apart, as allowed. A kernel whose guest wrote no results says so (and why, from
    its guest record)."""
    out = ["# pytest-lbr results", ""]
    out.append("| kernel | passed | failed | skipped | traced | splats |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for label, res in runs.items():
        if res is None or (res.session is None and not res.tests):
            out.append(f"| {label} | - | - | - | - | no results: {_no_results(res)} |")
            continue
        allowed = len(res.allowed_splats())
        splats = f"{len(res.failing_splats())}" + (f" (+{allowed} allowed)" if allowed else "")
        failed = res.count("failed") + res.count("error")
        out.append(
            f"| {_kernel_cell(label, res)} | {res.count('passed')} | {failed} | "
            f"{res.count('skipped')} | {res.traced} | {splats} |"
        )
    for label, res in runs.items():
        if res is not None:
            out.extend(_kernel_section(label, res))
    return "\n".join(out).rstrip() + "\n"


def _no_results(res: Results | None) -> str:
    guest = res.guest if res is not None else None
    if guest is not None and guest.error:
        return _quote(guest.error)
    if guest is not None and guest.status is not None:
        return f"pytest exited {guest.status} before any test ended"
    return "the guest never reported"


def _kernel_cell(label: str, res: Results) -> str:
    release = res.session.kernel_release if res.session else ""
    return f"{label} (`{release}`)" if release and release != label else label


def _kernel_section(label: str, res: Results) -> Iterable[str]:
    failures = [t for t in res.tests if t.outcome in ("failed", "error")]
    splats, allowed = res.failing_splats(), res.allowed_splats()
    if not failures and not splats and not allowed:
        return []
    out = ["", f"## {label}"]
    strict = [t for t in failures if t.skip_became_failure]
    for t in failures:
        if t.skip_became_failure:
            continue
        out += ["", f"### FAILED `{t.nodeid}`", "", _quote(t.reason)]
        for g in t.golden:
            if g.status == "mismatched" and g.diff:
                out += ["", f"Golden mismatch: `{g.file}`", "", "```diff", g.diff.rstrip(), "```"]
    if strict:
        out += ["", "### Skips that became failures", ""]
        out += [f"- `{t.nodeid}`: {_quote(t.reason)}" for t in strict]
    if splats:
        out += ["", "### Kernel splats", ""]
        out += [f"- {s.title}" + (f" (in `{s.nodeid}`)" if s.nodeid else "") for s in splats]
    if allowed:
        out += ["", "### Allowed kernel splats (`allow_splat`: provoked on purpose, not failures)"]
        out += [""] + [f"- {s.title} (in `{s.nodeid}`)" for s in allowed]
    return out


def _quote(text: str) -> str:
    """One line of text made safe for a Markdown table or list item."""
    line = text.strip().splitlines()[0] if text.strip() else "(no reason given)"
    return line.replace("|", "\\|")
