"""Comparing a trace's edge lines with its golden file: match, first divergence, diff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from pytest_lbr.golden.format import GoldenError, GoldenFile
from pytest_lbr.model import Trace

__all__ = ["Comparison", "compare"]


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing a trace with its golden file."""

    expected: list[str]
    actual: list[str]
    path: Path

    @property
    def matches(self) -> bool:
        """Whether the edge lines are the same (the header is not compared)."""
        return self.expected == self.actual

    def first_divergence(self) -> str:
        """One sentence naming the first edge line that differs."""
        for i, (want, got) in enumerate(zip(self.expected, self.actual, strict=False)):
            if want != got:
                return f"first divergence at edge {i + 1}: expected {want!r}, got {got!r}"
        n = min(len(self.expected), len(self.actual))
        if len(self.actual) > n:
            return f"first divergence at edge {n + 1}: unexpected {self.actual[n]!r}"
        if len(self.expected) > n:
            return f"first divergence at edge {n + 1}: missing {self.expected[n]!r}"
        return "no divergence"

    def diff(self, max_lines: int = 200) -> str:
        """Unified diff golden -> trace, cut after `max_lines` lines."""
        lines = list(
            difflib.unified_diff(
                self.expected,
                self.actual,
                fromfile=f"golden {self.path.name}",
                tofile="this run",
                lineterm="",
                n=2,
            )
        )
        if len(lines) > max_lines:
            lines = [*lines[:max_lines], f"... {len(lines) - max_lines} more diff lines"]
        return "\n".join(lines)


def compare(trace: Trace, golden: GoldenFile, path: Path, actual: list[str]) -> Comparison:
    """Compare normalised `actual` lines of `trace` with `golden`; foreign files raise."""
    if golden.backend != trace.backend:
        raise GoldenError(
            f"{path}: recorded with the {golden.backend} backend, this trace is from "
            f"{trace.backend}: pass --lbr-backend={golden.backend} or re-record"
        )
    if golden.header.get("arch") != trace.arch:
        raise GoldenError(
            f"{path}: recorded on {golden.header.get('arch')}, running on {trace.arch}"
        )
    return Comparison(golden.lines, actual, path)
