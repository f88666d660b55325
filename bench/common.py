"""Shared helpers for the benchmarks: timing, median (min-max), ratios, markdown tables.

Every figure in bench/RESULTS.md is the median of several runs with the
min-max beside it; ratios are taken between medians measured in the same run
(same machine, same load), because these machines are noisy and the guests
run under TCG, where only ratios mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REPO",
    "Stat",
    "add_common_args",
    "fmt_ratio",
    "fmt_stat",
    "load_json",
    "machine_info",
    "markdown_table",
    "ratio",
    "save_json",
    "stat",
    "timed",
    "timed_interleaved",
    "verdict",
]

REPO = Path(__file__).resolve().parents[1]
# Appended: the installed pytest-lbr (the wheel ci/setup builds) wins over the checkout.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))


@dataclass(frozen=True)
class Stat:
    """Median and range of one measured quantity over `n` runs."""

    median: float
    lo: float
    hi: float
    n: int


def stat(values: Sequence[float]) -> Stat:
    """Median, min, max of `values` (at least one)."""
    if not values:
        raise ValueError("stat() of no values")
    return Stat(statistics.median(values), min(values), max(values), len(values))


def _num(x: float, digits: int) -> str:
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def fmt_stat(values: Sequence[float] | None, digits: int = 3, unit: str = "") -> str:
    """'1.234 (1.100-1.400)' for several runs, '1.234 (1 run)' for one, '-' for none."""
    if not values:
        return "-"
    s = stat(values)
    if s.n == 1:
        return f"{_num(s.median, digits)}{unit} (1 run)"
    return f"{_num(s.median, digits)}{unit} ({_num(s.lo, digits)}-{_num(s.hi, digits)})"


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float | None:
    """Ratio of the medians; None when either side is missing or the denominator is <= 0."""
    if not numerator or not denominator:
        return None
    d = statistics.median(denominator)
    if d <= 0:
        return None
    return statistics.median(numerator) / d


def fmt_ratio(r: float | None, digits: int = 2) -> str:
    """'0.12x', or '-' when there is no ratio."""
    return "-" if r is None else f"{r:.{digits}f}x"


def verdict(measured: float | None, target: float, *, at_most: bool = True) -> str:
    """ "met" / "missed" for a measured ratio against its target; "not measured" if None."""
    if measured is None:
        return "not measured"
    ok = measured <= target if at_most else measured >= target
    return "met" if ok else "missed"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; pipes inside cells are escaped."""

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "| " + " | ".join("---" for _ in headers) + " |",
    ]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
        out.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(out)


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    """Wall-clock seconds of `runs` calls of `fn`."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def timed_interleaved(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Wall-clock seconds of `runs` calls of each function, taken in turns
    (a, b, c, a, b, c, ...) so that load swings on a shared machine hit every
    method alike: the ratios between them are what the results compare."""
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t0)
    return out


def machine_info() -> dict[str, Any]:
    """Where a measurement was taken: date, kernel, CPU, load (for the results header)."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 1),
        "guest": os.environ.get("PYTEST_LBR_GUEST") == "1",
    }


def add_common_args(parser: argparse.ArgumentParser, runs: int = 3) -> None:
    """--runs and --out, the options every bench script takes."""
    parser.add_argument("--runs", type=int, default=runs, help=f"runs per figure (default {runs})")
    parser.add_argument("--out", type=Path, help="write the results as JSON to this file")


def save_json(path: Path | None, data: dict[str, Any]) -> None:
    """Write `data` (plus machine info) as JSON, or print it when `path` is None."""
    data = {"machine": machine_info(), **data}
    text = json.dumps(data, indent=1, sort_keys=True)
    if path is None:
        print(text)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON a bench script wrote, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
