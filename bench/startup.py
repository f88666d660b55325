"""Benchmark: `pytest --lbr` session start-up on a suite with no traced tests vs plain pytest.

Writes a throw-away suite of `--tests` trivial tests (no `lbr` fixture, no
marker) and times whole `python -m pytest -q` processes, interleaving the
variants run by run so load drift hits them alike:

* plain      -- the plugin not loaded (`-p no:lbr`): what a user has without pytest-lbr;
* installed  -- the plugin loaded, tracing off (no --lbr);
* --lbr      -- the plugin loaded and tracing on.

Host-only is fine: nothing here touches the kernel.

    .venv/bin/python bench/startup.py [--runs 5] [--tests 50] [--out FILE]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, add_common_args, ratio, save_json  # noqa: E402

__all__ = ["VARIANTS", "main", "measure", "parse_args", "write_suite"]

#: name -> extra pytest arguments.
VARIANTS: dict[str, list[str]] = {
    "plain": ["-p", "no:lbr"],
    "installed": [],
    "--lbr": ["--lbr"],
}


def write_suite(directory: Path, tests: int) -> Path:
    """A suite of `tests` trivial passing tests in `directory`; returns the test file."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conftest.py").write_text("")
    body = "".join(f"def test_{i}():\n    assert {i} + 1 == {i + 1}\n\n" for i in range(tests))
    path = directory / "test_untraced.py"
    path.write_text(body)
    return path


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(
    suite: Path, runs: int, python: str = sys.executable
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(wall seconds, CPU seconds) per whole pytest process, per variant, `runs` each.

    CPU time (user + system of the child) is reported beside wall time because
    other VMs share these 2 cores: wall time swings 3x with their load, CPU time
    barely does.
    """
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    base = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite.parent)]
    for extra in VARIANTS.values():  # one unmeasured warm-up each (page cache, .pyc)
        subprocess.run([*base, *extra, str(suite)], capture_output=True, check=True)
    for _ in range(runs):
        for name, extra in VARIANTS.items():
            c0, t0 = _child_cpu(), time.perf_counter()
            out = subprocess.run([*base, *extra, str(suite)], capture_output=True, text=True)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(_child_cpu() - c0)
            if out.returncode != 0:
                raise RuntimeError(f"pytest {name} failed:\n{out.stdout}\n{out.stderr}")
    return times, cpu


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=5)
    ap.add_argument("--tests", type=int, default=50, help="tests in the untraced suite")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plbr-startup-") as tmp:
        suite = write_suite(Path(tmp) / "suite", args.tests)
        times, cpu = measure(suite, args.runs)
    result = {
        "benchmark": "startup",
        "tests": args.tests,
        "repo": str(REPO),
        "seconds": times,
        "cpu_seconds": cpu,
        "ratio_lbr_vs_plain": ratio(times["--lbr"], times["plain"]),
        "ratio_installed_vs_plain": ratio(times["installed"], times["plain"]),
        "cpu_ratio_lbr_vs_plain": ratio(cpu["--lbr"], cpu["plain"]),
        "cpu_ratio_installed_vs_plain": ratio(cpu["installed"], cpu["plain"]),
    }
    save_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
