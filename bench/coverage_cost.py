"""Benchmark (guest): what `--lbr-cov` adds to a traced suite's time.

The suite is the examples (`pytest examples --lbr`), run whole in one guest
boot, with and without `--lbr-cov` (each a fresh pytest process, as a user runs
it). One unmeasured warm-up first (one example file, with coverage) compiles
the plugin's bytecode and fills the symbol caches, so neither timed run pays
for them; then, by default, the coverage run first: whatever warm-up is left
favours the run without coverage, so the ratio errs against coverage.

    pytest-lbr vm --kernel 6.12 --results /tmp/b --exec \
        "python bench/coverage_cost.py --out /tmp/b/6.12/coverage_cost.json"

Writes the seconds of each run, the ratio and the coverage table's program
count; `--runs N` takes N of each, in turns.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
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


def _pytest(args: Sequence[str]) -> tuple[float, str]:
    """Seconds of one whole pytest process, and its output; fails on a failed suite."""
    t0 = time.perf_counter()
    proc = subprocess.run([*PYTEST, *args], cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
        )
    return seconds, proc.stdout


def run(runs: int, suite: str) -> dict[str, Any]:
    _pytest([WARMUP, "-q", "--lbr", "--lbr-cov"])
    times: dict[str, list[float]] = {"coverage": [], "traced": []}
    programs = 0
    for _ in range(runs):
        seconds, out = _pytest([suite, "-q", "--lbr", "--lbr-cov"])
        times["coverage"].append(seconds)
        programs = sum(1 for line in out.splitlines() if ".bpf.c" in line)
        times["traced"].append(_pytest([suite, "-q", "--lbr"])[0])
    return {
        "suite": suite,
        "seconds": times,
        "ratio": ratio(times["coverage"], times["traced"]),
        "programs_in_table": programs,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, runs=1)
    parser.add_argument("--suite", default="examples", help="what pytest runs (default examples)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = run(args.runs, args.suite)
    save_json(args.out, data)
    print(f"coverage / traced: {data['ratio']:.3f} ({data['seconds']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
