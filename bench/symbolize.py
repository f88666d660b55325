"""Benchmark: kernel address -> file:line (+ inlines) on Debian's 6.1 debug vmlinux.

Compares, on the same address sets, pytest-lbr's symbolizer cold (empty cache,
new process state), warm (a new VmlinuxLines reading the on-disk cache, as a
second session would), pyelftools alone (no llvm-symbolizer; small sets only),
llvm-symbolizer and binutils addr2line. Prints a markdown table (median of
--runs runs, with min-max) and writes it to bench/RESULTS-symbolize.md.

    .venv/bin/python bench/symbolize.py [--vmlinux PATH] [--runs 3] [--sizes 32,1000,100000]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import timed  # noqa: E402

from pytest_lbr.symbols.vmlinux import (  # noqa: E402
    VmlinuxLines,
    fetch_debian_dbg,
    sample_text_addresses,
)

RESULTS = Path(__file__).resolve().parent / "RESULTS-symbolize.md"


def _default_vmlinux() -> str:
    images = sorted(glob.glob("/boot/vmlinuz-6.1.0-*-amd64"))
    if not images:
        sys.exit("no /boot/vmlinuz-6.1.0-*-amd64: pass --vmlinux")
    return fetch_debian_dbg(os.path.basename(images[-1]).removeprefix("vmlinuz-"))


def _tool(*names: str) -> str | None:
    return next((p for n in names if (p := shutil.which(n))), None)


def _external(cmd: list[str], addrs: list[int]) -> Callable[[], object]:
    data = "\n".join(f"{a:#x}" for a in addrs) + "\n"

    def run() -> object:
        return subprocess.run(cmd, input=data, capture_output=True, text=True, check=True)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vmlinux")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="32,1000,100000")
    ap.add_argument(
        "--pyelftools-max",
        type=int,
        default=32,
        help="largest set also timed with pyelftools alone (it decodes every unit touched)",
    )
    args = ap.parse_args()
    vmlinux = args.vmlinux or _default_vmlinux()
    sizes = [int(s) for s in args.sizes.split(",")]
    llvm = _tool("llvm-symbolizer", "llvm-symbolizer-14")
    a2l = _tool("addr2line")
    probe = VmlinuxLines(vmlinux, cache=False)

    rows: list[tuple[str, int, list[float]]] = []
    for n in sizes:
        addrs = sample_text_addresses(probe, n, seed=n)
        print(f"# {n} addresses", file=sys.stderr)
        rows += _bench_ours(vmlinux, addrs, args.runs, args.pyelftools_max)
        if llvm:
            cmd = [llvm, f"--obj={vmlinux}", "--inlining"]
            name = f"{os.path.basename(llvm)} --inlining"
            rows.append((name, n, timed(_external(cmd, addrs), args.runs)))
        if a2l:
            cmd = [a2l, "-e", vmlinux, "-i", "-f"]
            rows.append(("addr2line -i -f", n, timed(_external(cmd, addrs), args.runs)))

    table = _table(rows, args.runs, vmlinux)
    print(table)
    RESULTS.write_text(table + "\n")


def _bench_ours(
    vmlinux: str, addrs: list[int], runs: int, pyelftools_max: int
) -> list[tuple[str, int, list[float]]]:
    n = len(addrs)
    rows = []
    with tempfile.TemporaryDirectory(prefix="plbr-bench-") as tmp:
        fresh = iter(range(10**6))

        def cold() -> object:
            # A fresh cache directory each run: nothing is known yet.
            d = Path(tmp) / f"cold{next(fresh)}"
            return VmlinuxLines(vmlinux, cache_directory=d).lookup(addrs)

        def warm() -> object:
            # A new object, as in a new session, reading the first cold run's cache.
            return VmlinuxLines(vmlinux, cache_directory=Path(tmp) / "cold0").lookup(addrs)

        def py() -> object:
            return VmlinuxLines(vmlinux, use_llvm=False, cache=False).lookup(addrs)

        rows.append(("pytest-lbr cold", n, timed(cold, runs)))
        rows.append(("pytest-lbr warm (disk cache)", n, timed(warm, runs)))
        if n <= pyelftools_max:
            rows.append(("pytest-lbr pyelftools only, cold", n, timed(py, 1)))
    return rows


def _table(rows: list[tuple[str, int, list[float]]], runs: int, vmlinux: str) -> str:
    sizes = sorted({n for _, n, _ in rows})
    methods = list(dict.fromkeys(m for m, _, _ in rows))
    cell = {(m, n): t for m, n, t in rows}
    out = [
        "# Symbolization benchmark",
        "",
        f"vmlinux: `{vmlinux}` ({os.path.getsize(vmlinux) >> 20} MiB); "
        f"host: {platform.node()} {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; "
        f"median of {runs} runs (min-max), seconds, wall clock, in-process for pytest-lbr, "
        "whole process for the external tools. Addresses: random offsets inside random "
        ".text functions (seed = set size).",
        "",
        "| method | " + " | ".join(f"{n:,} addrs" for n in sizes) + " |",
        "| --- | " + " | ".join("---:" for _ in sizes) + " |",
    ]
    for m in methods:
        cells = []
        for n in sizes:
            t = cell.get((m, n))
            if not t:
                cells.append("-")
            elif len(t) == 1:
                cells.append(f"{t[0]:.3f} (1 run)")
            else:
                cells.append(f"{statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})")
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
