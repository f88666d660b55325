"""Benchmark (guest): what `--lbr-cov` (or `--lbr-cov-exact`) adds to a traced suite's time.

The suite is the examples (`pytest examples --lbr`), run whole in one guest
boot, with and without `--lbr-cov` (each a fresh pytest process, as a user runs
it). One unmeasured warm-up first (one example file, with coverage) compiles
the plugin's bytecode and fills the symbol caches, so neither timed run pays
for them; then, by default, the coverage run first: whatever warm-up is left
favours the run without coverage, so the ratio errs against coverage.

    pytest-lbr vm --kernel 6.12 --results /tmp/b --exec \
        "python bench/coverage_cost.py --out /tmp/b/6.12/coverage_cost.json"

Two runs on a shared machine differ by more than 10% from load alone, so the
coverage run also accounts for its own work in-process: this module, loaded
into it as a plugin (`-p coverage_cost`), times every call of the collector
(`CoverageCollector.add`: reading a traced program's code, its control flow, a
trace's evidence) and the session's end (records, report files, the table).
`added` is that run's time over its time less that work: what coverage adds.

Writes the seconds of each run, both ratios and the coverage table's program
count; `--runs N` takes N of each, in turns. `--mode exact` measures
`--lbr --lbr-cov-exact` instead: its in-process work is the counted programs' loads
(`ExactCoverage.after_load`: a second verification of each program) and the reads
after each test; what the counters cost the programs while they run is in the wall
time only (run against run).

    pytest-lbr vm --kernel 6.12 --results /tmp/b --exec \
        "python bench/coverage_cost.py --mode exact --out /tmp/b/6.12/coverage_exact.json"
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, add_common_args, ratio, save_json  # noqa: E402

__all__ = ["main", "parse_args"]

#: The warm-up: one example file, traced and covered.
WARMUP = "examples/xdp_counter"
#: How pytest runs (as the guest side starts it): the suite's order fixed.
PYTEST = [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly"]


#: Where the plugin half writes the seconds coverage took (set by the bench half).
_OUT_ENV = "COVERAGE_COST_OUT"
_spent = [0.0]


def _timed(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[0] += time.perf_counter() - t0

    return wrapper


def pytest_configure(config: Any) -> None:
    """Plugin half (`-p coverage_cost`): time coverage's own work in this session."""
    from pytest_lbr.coverage.collect import CoverageCollector
    from pytest_lbr.coverage.exact import ExactCoverage
    from pytest_lbr.plugin.coverage import CoverageSession

    CoverageCollector.add = _timed(CoverageCollector.add)  # type: ignore[method-assign]
    ExactCoverage.after_load = _timed(ExactCoverage.after_load)  # type: ignore[method-assign]
    ExactCoverage.read_into = _timed(ExactCoverage.read_into)  # type: ignore[method-assign]
    CoverageSession.finish = _timed(CoverageSession.finish)  # type: ignore[method-assign]
    CoverageSession.summary = _timed(CoverageSession.summary)  # type: ignore[method-assign]


def pytest_unconfigure(config: Any) -> None:
    out = os.environ.get(_OUT_ENV)
    if out:
        Path(out).write_text(f"{_spent[0]}\n")


def _pytest(args: Sequence[str], spent: Path | None = None) -> tuple[float, str]:
    """Seconds of one whole pytest process, and its output; fails on a failed suite.
    `spent`: load this module into it and have it write coverage's seconds there."""
    env = dict(os.environ)
    if spent is not None:
        env[_OUT_ENV] = str(spent)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent)
        args = ["-p", "coverage_cost", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*PYTEST, *args], cwd=REPO, capture_output=True, text=True, check=False, env=env
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
        )
    return seconds, proc.stdout


#: The coverage option of each mode.
MODES = {"trace": "--lbr-cov", "exact": "--lbr-cov-exact"}


def run(runs: int, suite: str, mode: str = "trace", alternate: bool = False) -> dict[str, Any]:
    """`runs` turns of the suite with coverage and without; `alternate`: the
    uncovered run first in every other turn (coverage, plain, plain, coverage...), so
    that a boot's runs getting faster one after the other weighs on both alike."""
    option = MODES[mode]
    _pytest([WARMUP, "-q", "--lbr", option])
    times: dict[str, list[float]] = {"coverage": [], "traced": [], "spent": []}
    programs = 0
    spent = Path(tempfile.mkdtemp()) / "spent"
    for turn in range(runs):
        if alternate and turn % 2:  # traced first in every other turn
            times["traced"].append(_pytest([suite, "-q", "--lbr"])[0])
        seconds, out = _pytest([suite, "-q", "--lbr", option], spent)
        times["coverage"].append(seconds)
        times["spent"].append(float(spent.read_text()))
        programs = sum(1 for line in out.splitlines() if ".bpf.c" in line)
        if not (alternate and turn % 2):
            times["traced"].append(_pytest([suite, "-q", "--lbr"])[0])
    rest = [c - s for c, s in zip(times["coverage"], times["spent"], strict=True)]
    return {
        "mode": mode,
        "alternate": alternate,
        "suite": suite,
        "seconds": times,
        "ratio": ratio(times["coverage"], times["traced"]),
        "added": ratio(times["coverage"], rest),
        "programs_in_table": programs,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, runs=1)
    parser.add_argument("--suite", default="examples", help="what pytest runs (default examples)")
    parser.add_argument(
        "--mode", choices=sorted(MODES), default="trace", help="coverage from traces or counters"
    )
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="the plain run first in every other turn (default: coverage first in each)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = run(args.runs, args.suite, args.mode, args.alternate)
    save_json(args.out, data)
    print(
        f"coverage / traced: {data['ratio']:.3f}; coverage's own work added "
        f"{data['added']:.3f}x to its run ({data['seconds']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
