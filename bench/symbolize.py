"""Benchmark: kernel address -> file:line (+ inlines) on Debian's 6.1 debug vmlinux.

Compares, on the same address sets, pytest-lbr's symbolizer cold (empty cache,
new process state), warm (a new VmlinuxLines reading the on-disk cache, as a
second session would; once with a cache of just these addresses, once with one
that also holds 100,000 others, as a long-used cache does), pyelftools alone (no llvm-symbolizer; small sets only),
llvm-symbolizer and binutils addr2line, timed in turns (ours, llvm, addr2line,
ours, ...) so load swings hit them alike. Prints a markdown table (median of
--runs runs, with min-max) and writes it to bench/RESULTS-symbolize.md.

    .venv/bin/python bench/symbolize.py [--vmlinux PATH] [--runs 5] [--sizes 32,1000,100000]
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
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import timed, timed_interleaved  # noqa: E402

from pytest_lbr.cli.fetch_vmlinux import fetch_debian_dbg  # noqa: E402
from pytest_lbr.progress import set_progress  # noqa: E402
from pytest_lbr.symbols.dwarf import Frame  # noqa: E402
from pytest_lbr.symbols.vmlinux import VmlinuxLines, sample_text_addresses  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS-symbolize.md"
BIG = 100_000  # the "large cache" rows: a cache also holding this many other addresses


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
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="32,1000,100000")
    ap.add_argument(
        "--pyelftools-max",
        type=int,
        default=32,
        help="largest set also timed with pyelftools alone (it decodes every unit touched)",
    )
    args = ap.parse_args()
    # The download and long DWARF reads say where they are, as `pytest-lbr` does.
    set_progress(lambda message: print(f"bench: {message}", file=sys.stderr, flush=True))
    vmlinux = args.vmlinux or _default_vmlinux()
    sizes = [int(s) for s in args.sizes.split(",")]
    llvm = _tool("llvm-symbolizer", "llvm-symbolizer-14")
    a2l = _tool("addr2line")
    probe = VmlinuxLines(vmlinux, cache=False)

    rows: list[tuple[str, int, list[float]]] = []
    big = Path(tempfile.mkdtemp(prefix="plbr-bench-big-"))
    print(f"# a cache of {BIG:,} other addresses", file=sys.stderr)
    VmlinuxLines(vmlinux, cache_directory=big).lookup(sample_text_addresses(probe, BIG, seed=1))
    for n in sizes:
        addrs = sample_text_addresses(probe, n, seed=n)
        print(f"# {n} addresses", file=sys.stderr)
        VmlinuxLines(vmlinux, cache_directory=big).lookup(addrs)  # now cached there too
        with tempfile.TemporaryDirectory(prefix="plbr-bench-") as tmp:
            methods = _ours(vmlinux, addrs, Path(tmp))
            methods[f"pytest-lbr from a {BIG:,}+ address cache"] = partial(
                _warm, vmlinux, addrs, big
            )
            if llvm:
                cmd = [llvm, f"--obj={vmlinux}", "--inlining"]
                methods[f"{os.path.basename(llvm)} --inlining"] = _external(cmd, addrs)
            if a2l:
                methods["addr2line -i -f"] = _external([a2l, "-e", vmlinux, "-i", "-f"], addrs)
            methods["pytest-lbr cold"]()  # fills the cache the warm runs read
            rows += [(m, n, t) for m, t in timed_interleaved(methods, args.runs).items()]
            if n <= args.pyelftools_max:
                py = VmlinuxLines(vmlinux, use_llvm=False, cache=False)
                rows.append(
                    ("pytest-lbr pyelftools only, cold", n, timed(partial(py.lookup, addrs), 1))
                )

    shutil.rmtree(big, ignore_errors=True)
    table = _table(rows, args.runs, vmlinux)
    print(table)
    RESULTS.write_text(table + "\n")


def _consume(found: dict[int, tuple[Frame, ...]]) -> int:
    """Touch every answer, as a caller building Locations would."""
    return sum(len(frames) for frames in found.values())


def _warm(vmlinux: str, addrs: list[int], cache: Path) -> object:
    """A new object, as in a new session, answering from the disk cache."""
    return _consume(VmlinuxLines(vmlinux, cache_directory=cache).lookup(addrs))


def _ours(vmlinux: str, addrs: list[int], tmp: Path) -> dict[str, Callable[[], object]]:
    """pytest-lbr cold (a fresh cache directory each call: nothing known yet) and
    warm (reading the cache the first cold call wrote: these addresses only)."""
    fresh = iter(range(10**6))

    def cold() -> object:
        d = tmp / f"cold{next(fresh)}"
        return _consume(VmlinuxLines(vmlinux, cache_directory=d).lookup(addrs))

    return {
        "pytest-lbr cold": cold,
        "pytest-lbr warm (disk cache)": partial(_warm, vmlinux, addrs, tmp / "cold0"),
    }


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
