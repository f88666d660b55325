"""Trimming the tracer's own records off a hit's branches (pure).

A branch snapshot is taken inside the tracer's hook, so its newest records are
the tracer's own way in: the trampoline, the hook, the helper (`noise.TRACER_SYMBOLS`).
Once the addresses are named, the LBR backend's `trim` drops them with these
functions, and the selftest counts what they drop; no backend is named here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence

from pytest_lbr.model import Branch, Hit, Location
from pytest_lbr.noise import TRACER_SYMBOLS

__all__ = ["trim_tracer", "trim_tracer_hits"]


def trim_tracer(
    branches: Sequence[Branch],
    traced: Callable[[Location], bool] | None = None,
    tracer: Sequence[str] = TRACER_SYMBOLS,
) -> list[Branch]:
    """Drop the LBR tracer's own newest records from `branches` (oldest first, symbolized).

    With `traced` (is this location in the traced function?), keep everything
    up to the newest branch touching it, as retsnoop does. Without it, or when
    no branch touches it, drop the newest run of branches into or out of the
    tracer's code (`tracer` symbol globs).
    """
    if traced is not None:
        for i in range(len(branches) - 1, -1, -1):
            if traced(branches[i].src) or traced(branches[i].dst):
                return list(branches[: i + 1])
    end = len(branches)
    while end and (
        _matches(branches[end - 1].src, tracer) or _matches(branches[end - 1].dst, tracer)
    ):
        end -= 1
    return list(branches[:end])


def _matches(loc: Location, patterns: Iterable[str]) -> bool:
    return loc.symbol is not None and any(fnmatch.fnmatchcase(loc.symbol, p) for p in patterns)


def trim_tracer_hits(hits: list[Hit], traced: dict[str, str]) -> None:
    """Set each LBR hit's `branches` to its symbolized `raw_branches` without the tracer's
    own; `traced`: a hit's target -> the symbol of the function its hook traced."""
    for h in hits:
        symbol = traced.get(h.target)
        h.branches = trim_tracer(h.raw_branches, _in_function(symbol) if symbol else None)


def _in_function(symbol: str) -> Callable[[Location], bool]:
    return lambda loc: loc.symbol == symbol
