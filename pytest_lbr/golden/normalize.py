"""Turning a `Trace` into the edge lines a golden file stores and compares.

`normalize` drops what is not the code under test (interrupts, softirq and RCU work
that happened to run, the tracer's own machinery: `pytest_lbr.noise.DEFAULT_EXCLUDE`) and collapses
repetitions whose count varies from run to run. Program ids and addresses never
appear, so KASLR and JIT placement don't matter.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_lbr.model import CALL_KINDS, FRAME_KINDS, Branch, Trace
from pytest_lbr.names import GoldenLevel, parse_name
from pytest_lbr.noise import DEFAULT_EXCLUDE

__all__ = ["Normalization", "normalize"]


@dataclass(frozen=True)
class Normalization:
    """What `normalize` drops and folds; per test via the marker's keyword arguments."""

    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    #: Patterns taken back out of `exclude` (e.g. a test about RCU keeps "rcu_*").
    keep: tuple[str, ...] = ()
    #: Fold immediately repeated runs of up to `max_repeat_block` lines into one copy.
    collapse: bool = True
    max_repeat_block: int = 8
    #: Sort hits by content: for targets that fire on several CPUs in any order.
    sort_hits: bool = False

    def excluded(self, symbol: str | None) -> bool:
        """Whether `symbol` is left out: matches `exclude` and not `keep` (unknown: kept)."""
        if symbol is None:
            return False
        if any(fnmatch.fnmatchcase(symbol, p) for p in self.keep):
            return False
        return any(fnmatch.fnmatchcase(symbol, p) for p in self.exclude)


_PROG_ID_RE = re.compile(r"^(prog:)?\d+$")


def _target_label(target: str) -> str:
    # Program ids change with every load; names and tags do not.
    return "prog:<id>" if _PROG_ID_RE.match(target) else target


def _endpoint(branch: Branch, level: str, side: str) -> str:
    loc = branch.src if side == "src" else branch.dst
    sym = loc.symbol or "?"
    if level == "function":
        return sym
    if level == "symbol":
        return f"{sym}+{loc.offset:#x}" if loc.symbol else "?"
    return f"{sym} ({loc.source})" if loc.source else f"{sym} (?)"


def _edge(branch: Branch, level: str) -> str | None:
    if level == "function":
        if branch.kind not in CALL_KINDS:
            return None
        return f"{_endpoint(branch, level, 'src')} -> {_endpoint(branch, level, 'dst')}"
    src, dst = _endpoint(branch, level, "src"), _endpoint(branch, level, "dst")
    return f"{branch.kind} {src} -> {dst}"


def _hit_edges(branches: Sequence[Branch], level: str, norm: Normalization) -> list[str]:
    balanced = any(b.kind == "ret" for b in branches)
    out: list[str] = []
    skip_depth = 0
    for b in branches:
        if skip_depth:
            # Inside an excluded function: drop its whole subtree (needs call/ret pairs).
            if b.kind in FRAME_KINDS:
                skip_depth += 1
            elif b.kind == "ret":
                skip_depth -= 1
            continue
        if b.kind in CALL_KINDS and (norm.excluded(b.dst.symbol) or norm.excluded(b.src.symbol)):
            # A call into an excluded function, or made by one that was entered
            # unseen (notrace, like __schedule): the callee's subtree is noise too.
            skip_depth = 1 if balanced else 0
            continue
        if norm.excluded(b.src.symbol) or norm.excluded(b.dst.symbol):
            continue
        line = _edge(b, level)
        if line is not None:
            out.append(line)
    return _collapse_repeats(out, norm.max_repeat_block) if norm.collapse else out


def _collapse_repeats(lines: list[str], max_block: int) -> list[str]:
    """Fold `X X X` -> `X` and `A B A B` -> `A B` (loop counts vary from run to run)."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        for size in range(1, max_block + 1):
            if len(out) >= 2 * size and out[-size:] == out[-2 * size : -size]:
                del out[-size:]
                break
    return out


def normalize(
    trace: Trace, level: str = "function", norm: Normalization | None = None
) -> list[str]:
    """The edge lines of `trace` at `level` (a `GoldenLevel`; ValueError naming them
    otherwise): what a golden file stores and compares."""
    level = parse_name(GoldenLevel, level)
    norm = norm or Normalization()
    blocks: list[list[str]] = []
    for hit in trace.hits:
        edges = _hit_edges(hit.branches, level, norm)
        blocks.append([f"hit {_target_label(hit.target)}", *edges])
    if norm.sort_hits:
        blocks.sort()
    lines = [line for block in blocks for line in block]
    # Hits that fire once per loop iteration fold like repeated edges do.
    return _collapse_repeats(lines, norm.max_repeat_block) if norm.collapse else lines
