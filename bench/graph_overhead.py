"""Benchmark (guest): the graph backend's overhead on a syscall-heavy test body.

The body: `--writes` one-byte write(2)s to /dev/null (ksys_write -> vfs_write
-> write_null each). Variants, interleaved run by run:

* untraced               -- the body alone, in this process;
* pytest-lbr graph       -- `Tracer(backend="graph").trace("kfunc:vfs_write")`
  around the body (function tracer on this process's threads); "body" is the
  time inside the block, "total" adds arming, collecting and building hits;
* trace-cmd function_graph -- `trace-cmd record -p function_graph -F` running
  the same body in a child python (which times its own body), then
  `trace-cmd report` so the trace is readable like ours; "total" is record +
  report minus an untraced child python's whole run (its start-up).

    python bench/graph_overhead.py [--runs 3] [--writes 2000] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, ratio, save_json  # noqa: E402

__all__ = ["BODY", "body", "main", "parse_args"]

#: The child's body: prints its own duration in seconds.
BODY = (
    "import os, sys, time\n"
    "n = int(sys.argv[1])\n"
    "fd = os.open('/dev/null', os.O_WRONLY)\n"
    "t0 = time.perf_counter()\n"
    "for _ in range(n):\n"
    "    os.write(fd, b'x')\n"
    "print(time.perf_counter() - t0)\n"
)


def body(writes: int) -> float:
    """The test body in this process; returns its duration."""
    fd = os.open("/dev/null", os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        for _ in range(writes):
            os.write(fd, b"x")
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _child(writes: int, prefix: Sequence[str] = ()) -> tuple[float, float]:
    """(body seconds as the child measured it, whole command seconds)."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [*prefix, sys.executable, "-c", BODY, str(writes)],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    total = time.perf_counter() - t0
    return float(out.stdout.strip().splitlines()[-1]), total


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=3)
    ap.add_argument("--writes", type=int, default=2000, help="write(2) calls in the body")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    from pytest_lbr.tracer import Tracer

    args = parse_args(argv)
    tracer = Tracer(backend="graph")
    have_tc = shutil.which("trace-cmd") is not None
    r: dict[str, list[float]] = {
        k: []
        for k in (
            "untraced",
            "untraced_child",
            "untraced_child_total",
            "graph_body",
            "graph_total",
            "tracecmd_body",
            "tracecmd_total",
        )
    }
    info: dict[str, Any] = {"hits": [], "lost": [], "tracecmd_bytes": []}
    body(100)  # warm-up
    with tempfile.TemporaryDirectory(prefix="plbr-graph-") as tmp:
        dat = str(Path(tmp) / "trace.dat")
        for _ in range(args.runs):
            r["untraced"].append(body(args.writes))
            b, total = _child(args.writes)
            r["untraced_child"].append(b)
            r["untraced_child_total"].append(total)

            t0 = time.perf_counter()
            with tracer.trace("kfunc:vfs_write") as trace:
                r["graph_body"].append(body(args.writes))
            r["graph_total"].append(time.perf_counter() - t0)
            info["hits"].append(len(trace.hits))
            info["lost"].append(trace.lost)

            if have_tc:
                rec = ["trace-cmd", "record", "-q", "-p", "function_graph", "-b", "16384"]
                t0 = time.perf_counter()
                b, _ = _child(args.writes, [*rec, "-o", dat, "-F"])
                subprocess.run(
                    ["trace-cmd", "report", "-i", dat],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=True,
                )
                r["tracecmd_body"].append(b)
                r["tracecmd_total"].append(time.perf_counter() - t0)
                info["tracecmd_bytes"].append(os.path.getsize(dat))
    base_child = min(r["untraced_child_total"])
    r["tracecmd_net"] = [max(t - base_child, 0.0) for t in r["tracecmd_total"]]
    save_json(
        args.out,
        {
            "benchmark": "graph_overhead",
            "writes": args.writes,
            "seconds": r,
            **info,
            "trace_cmd": have_tc,
            "ratios": {
                "graph_body_vs_untraced": ratio(r["graph_body"], r["untraced"]),
                "graph_total_vs_untraced": ratio(r["graph_total"], r["untraced"]),
                "tracecmd_body_vs_untraced": ratio(r["tracecmd_body"], r["untraced_child"]),
                "tracecmd_net_vs_untraced": ratio(r["tracecmd_net"], r["untraced_child"]),
                "graph_total_vs_tracecmd_net": ratio(r["graph_total"], r["tracecmd_net"]),
                "graph_body_vs_tracecmd_body": ratio(r["graph_body"], r["tracecmd_body"]),
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
