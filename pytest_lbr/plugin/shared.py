"""What the plugin's parts share: each test's `TestRecord` and `WrittenPrograms` book,
options read one way, where this process runs under pytest-xdist, and the session's
tracing verdict.

The lbr session (`session.py`), the golden checks (`golden.py`), the kernel-splat
watch (`splats.py`), the results file (`results_writer.py`) and coverage
(`coverage.py`) are pytest plugins of their own; they meet here, not in each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from pytest_lbr.names import Name, choices, parse_name
from pytest_lbr.programs.written import WrittenPrograms
from pytest_lbr.report.record import TestRecord

__all__ = [
    "TracingVerdict",
    "choice",
    "is_controller",
    "is_worker",
    "known_record",
    "option",
    "option_group",
    "record_of",
    "tracing_verdict",
    "written_of",
]

_RECORD_KEY = pytest.StashKey[TestRecord]()
_WRITTEN_KEY = pytest.StashKey[WrittenPrograms]()


class TracingVerdict(NamedTuple):
    """Whether this session could trace (the lbr session's backend probe)."""

    #: The backend that ran ("" without --lbr).
    backend: str
    tracing: bool
    #: Why not, when it could not.
    reason: str


#: The lbr session's verdict, asked for when needed: it probes the backend if no test
#: did (a probe at every session's end would clean up after a crashed xdist worker
#: that a later session is meant to find).
VERDICT_KEY = pytest.StashKey[Callable[[], TracingVerdict]]()


def record_of(item: pytest.Item) -> TestRecord:
    """The test's record (traces, golden checks, splats), made on first use."""
    if _RECORD_KEY not in item.stash:
        item.stash[_RECORD_KEY] = TestRecord(item.nodeid)
    return item.stash[_RECORD_KEY]


def written_of(item: pytest.Item) -> WrittenPrograms:
    """The test's book of what its `bpf` fixture's programs were loaded from: the
    fixture's loader adds to it, its `lbr` tracer reads it (made on first use)."""
    if _WRITTEN_KEY not in item.stash:
        item.stash[_WRITTEN_KEY] = WrittenPrograms()
    return item.stash[_WRITTEN_KEY]


def known_record(item: pytest.Item) -> TestRecord | None:
    """The test's record if something made it (a test without tracing has none)."""
    return item.stash.get(_RECORD_KEY, None)


def tracing_verdict(config: pytest.Config) -> TracingVerdict:
    """Whether this session could trace, and why not."""
    verdict = config.stash.get(VERDICT_KEY, None)
    return verdict() if verdict is not None else TracingVerdict("", False, "tracing disabled")


def option_group(parser: pytest.Parser) -> Any:
    """The one group of `pytest --help` every part's options go in."""
    return parser.getgroup("lbr", "LBR branch tracing (pytest-lbr)")


def option(config: pytest.Config, dest: str) -> Any:
    """An option's value from the command line, else its ini key (else None/False)."""
    value = config.getoption(dest, default=None)
    if value is None or value is False:
        ini = config.getini(dest)
        return ini if ini not in ("", [], None) else value
    return value


def choice(what: str, kind: type[Name], value: str) -> Name:
    """The member of `kind` an option or ini key (`what`) names; else a usage error of
    one line that lists the accepted values. Checked where the value arrives: argparse
    checks the command line's choices, nothing but this an ini file's."""
    try:
        return parse_name(kind, value)
    except ValueError:
        raise pytest.UsageError(
            f"{what}: unknown value {value!r}; choose from {', '.join(choices(kind))}"
        ) from None


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker."""
    return hasattr(config, "workerinput")


def is_controller(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller (it runs no test itself)."""
    return (
        not is_worker(config)
        and config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
    )
