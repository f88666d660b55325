"""The words users choose options with, one `StrEnum` per vocabulary, and `parse_name`.

    parse_name(BackendName, "graph")   # BackendName.GRAPH
    parse_name(BackendName, "pt")      # ValueError: unknown backend 'pt'; expected one of auto, lbr, graph

Each vocabulary is named here once; the pytest options and ini keys, `pytest-lbr
trace`'s options, `Tracer`, `LiveTrace`, `Scope.of` and the golden check take their
choices from it and check what a user wrote with `parse_name` where it arrives.
Members are strings (`BackendName.GRAPH == "graph"`), so code past that point
compares with plain strings. Only the standard library is imported: option
parsing imports this module.
"""

from __future__ import annotations

import enum
from typing import TypeVar

__all__ = [
    "BackendName",
    "ColorWhen",
    "CoverageFormat",
    "GoldenLevel",
    "LbrFilter",
    "Name",
    "PmuName",
    "ScopeKind",
    "SplatMode",
    "choices",
    "parse_coverage_report",
    "parse_name",
]


class BackendName(enum.StrEnum):
    """How traces are taken (`--lbr-backend`, `pytest-lbr trace --backend`,
    `Tracer(backend=...)`): `lbr` reads the CPU's last branch records at each hit,
    `graph` the kernel's function tracer (calls and returns, no CPU feature needed),
    `auto` (the default) the first of them that works on this machine."""

    AUTO = "auto"
    LBR = "lbr"
    GRAPH = "graph"


class CoverageFormat(enum.StrEnum):
    """The files `--lbr-cov-report=FORMAT:PATH` writes: `lcov` (an LCOV tracefile,
    for genhtml and CI services) or `cobertura` (Cobertura XML)."""

    LCOV = "lcov"
    COBERTURA = "cobertura"


class PmuName(enum.StrEnum):
    """What the `lbr` backend runs on (`--lbr-pmu`, `pytest-lbr trace --pmu`):
    `hardware` (the default) the CPU's LBR, branches at every hit; `software`
    software perf events, every hit without its branches, where no CPU has LBR."""

    HARDWARE = "hardware"
    SOFTWARE = "software"


class LbrFilter(enum.StrEnum):
    """Which branches the CPU records (`--lbr-filter`, `pytest-lbr trace --filter`;
    the LBR backend only): every branch (`any`), calls, returns, conditional or
    indirect jumps, or the call stack (`perf_event_attr.branch_sample_type`)."""

    ANY = "any"
    ANY_CALL = "any_call"
    ANY_RETURN = "any_return"
    CALL = "call"
    IND_CALL = "ind_call"
    COND = "cond"
    CALL_STACK = "call_stack"
    IND_JUMP = "ind_jump"


class ScopeKind(enum.StrEnum):
    """Whose work a trace records (ini `lbr_scope`, `lbr.trace(scope=...)`):
    this process's threads (`process`, the default), also the processes they start
    while the trace is armed (`children`), or every task and interrupt (`system`)."""

    PROCESS = "process"
    CHILDREN = "children"
    SYSTEM = "system"


class GoldenLevel(enum.StrEnum):
    """How much a golden trace says of each edge (`lbr.check_golden(level=...)`,
    `@pytest.mark.lbr(level=...)`): function names (`function`, the default),
    symbol+offset (`symbol`) or file:line (`line`)."""

    FUNCTION = "function"
    SYMBOL = "symbol"
    LINE = "line"


class SplatMode(enum.StrEnum):
    """What a kernel splat (WARNING:, BUG:, Oops...) in the kernel log does
    (`--lbr-kernel-splats`): `fail` fails the test it happened in, or the run;
    `off` leaves the kernel log alone."""

    FAIL = "fail"
    OFF = "off"


class ColorWhen(enum.StrEnum):
    """When `pytest-lbr trace` colours its call trees (`--color`): on a terminal
    (`auto`, the default), `always`, or `never`."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


#: What each vocabulary is called in the one-line error.
_NOUNS: dict[type[enum.StrEnum], str] = {
    BackendName: "backend",
    PmuName: "PMU",
    LbrFilter: "LBR filter",
    ScopeKind: "scope",
    GoldenLevel: "golden level",
    SplatMode: "kernel-splat mode",
    CoverageFormat: "coverage report format",
    ColorWhen: "colour choice",
}

#: Any of the vocabularies above (`parse_name` returns a member of the one it is given).
Name = TypeVar("Name", bound=enum.StrEnum)


def parse_name(kind: type[Name], value: str) -> Name:
    """The member of `kind` a user wrote (`value`, exactly as listed, or a member);
    else ValueError, one line: `unknown backend 'pt'; expected one of auto, lbr, graph`."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"unknown {_NOUNS[kind]} {value!r}; expected one of {', '.join(kind)}"
        ) from None


def choices(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """`kind`'s values as plain strings, in order: argparse `choices=` (whose error
    would show a member's repr)."""
    return tuple(member.value for member in kind)


def parse_coverage_report(value: str) -> tuple[CoverageFormat, str]:
    """`--lbr-cov-report`'s FORMAT:PATH as (format, path); else ValueError, one line."""
    kind, sep, path = value.partition(":")
    fmt = parse_name(CoverageFormat, kind)
    if not sep or not path:
        raise ValueError(f"{value!r} names no file; write {kind}:PATH")
    return fmt, path
