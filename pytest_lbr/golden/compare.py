"""Comparing a trace's edge lines with its golden file: match, first divergence, diff."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    #: Kernel function -> the BPF helper it ran for (from the trace): shown
    #: beside the kernel's names in the diff, never compared.
    helpers: Mapping[str, str] = field(default_factory=dict)

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
        lines = [self._with_helpers(line) for line in lines]
        if len(lines) > max_lines:
            lines = [*lines[:max_lines], f"... {len(lines) - max_lines} more diff lines"]
        return "\n".join(lines)

    def _with_helpers(self, line: str) -> str:
        """`+xdp_count -> bpf_user_rnd_u32   [bpf_get_prandom_u32]` for an edge line."""
        if line.startswith(("---", "+++", "@@")) or " -> " not in line:
            return line
        # Any level: the function name leads each end ("f", "f+0x1a", "f (file:line)").
        ends = [end.strip().split()[0].split("+")[0] for end in line[1:].split(" -> ", 1)]
        names = [self.helpers.get(end) for end in ends if end]
        shown = [n for n in names if n]
        return f"{line}   [{', '.join(shown)}]" if shown else line


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
    helpers = {
        loc.symbol: loc.helper
        for b in trace.branches()
        for loc in (b.src, b.dst)
        if loc.symbol and loc.helper and loc.helper != loc.symbol
    }
    return Comparison(golden.lines, actual, path, helpers)
