"""Benchmark (guest): a system-wide trace of an attached XDP program while a process starts.

The body is what a CI job for an attached program does (examples/veth_xdp,
issue 27): examples/veth_xdp/build/veth_xdp.bpf.o attached in generic mode to
the host end of a veth pair, and a Python process started in the peer
namespace (`ip netns exec`) that sends 3 UDP packets to a socket here. Starting
that process is hundreds of thousands of kernel calls on every CPU.

Variants, each one whole body:

* untraced;
* graph, depth D -- `Tracer(backend="graph").trace(prog, scope="system")`, the
  function tracer narrowed to the program's call graph D calls below the
  functions its JITed image calls (`pytest_lbr.capture.graph.narrow`; the
  product's depth is `NARROW_DEPTH`), one tracer for the whole run as a session
  keeps it;
* lbr (software events) -- the LBR backend's system scope (filtered in its BPF
  hooks), on software perf events since the guest has no PMU.

Every traced body must give 3 runs of the program (hits with bpf_csum_diff) and
lose nothing; the table reports records kept, hits and lost besides the time.
One unmeasured warm-up of each variant, then `--runs` interleaved runs.

    python bench/system_scope.py [--runs 5] [--depths 0,1,2,3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, add_common_args, ratio, save_json  # noqa: E402
from pertest import lbr_trace  # noqa: E402

__all__ = ["main", "parse_args"]

XDP_OBJECT = REPO / "examples" / "veth_xdp" / "build" / "veth_xdp.bpf.o"
PORT, PACKETS, XDP_PASS = 4242, 3, 2
SENDER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "for i in range(3):\n"
    "    s.sendto(b'packet %d' % i, (sys.argv[1], int(sys.argv[2])))\n"
)


def _body(veth: Any, rx: socket.socket) -> None:
    veth.run([sys.executable, "-c", SENDER, veth.host.addr, str(PORT)], check=True)
    got = [rx.recv(64) for _ in range(PACKETS)]
    if got != [b"packet %d" % i for i in range(PACKETS)]:
        raise RuntimeError(f"received {got}")


def _check(trace: Any, name: str, stats: dict[str, list[int]]) -> None:
    # Without branches (the LBR path on software events) a run is a hit with XDP_PASS.
    branches = any(h.branches for h in trace.hits)
    runs = [
        h
        for h in trace.hits
        if ("bpf_csum_diff" in h.functions() if branches else h.retval == XDP_PASS)
    ]
    stats.setdefault(f"{name}: hits", []).append(len(runs))
    stats.setdefault(f"{name}: lost", []).append(trace.lost)
    stats.setdefault(f"{name}: records", []).append(trace.capture_text.count("\n"))
    if len(runs) < PACKETS or trace.lost:
        raise RuntimeError(f"{name}: {len(runs)} runs, {trace.lost} lost\n{trace}")


def variants(
    prog: Any, veth: Any, rx: socket.socket, depths: Sequence[int], stats: dict[str, list[int]]
) -> dict[str, Callable[[], None]]:
    """name -> one whole body."""
    from pytest_lbr.capture.graph import narrow as graph_narrow
    from pytest_lbr.tracer import Tracer

    graph = Tracer(backend="graph")

    def traced(name: str, cm: Callable[[], Any], depth: int | None = None) -> Callable[[], None]:
        def run() -> None:
            if depth is not None:
                graph_narrow.NARROW_DEPTH = depth
            with cm() as trace:
                _body(veth, rx)
            _check(trace, name, stats)

        return run

    out: dict[str, Callable[[], None]] = {"untraced": lambda: _body(veth, rx)}
    out["lbr (software events)"] = traced(
        "lbr (software events)", lambda: lbr_trace(prog, "system")
    )
    for d in depths:
        name = f"graph, depth {d}"
        out[name] = traced(name, lambda: graph.trace(prog, scope="system"), d)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=5)
    ap.add_argument("--depths", default="0,1,2,3", help="narrowing depths to measure")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    from pytest_lbr.bpf import BpfLoader
    from pytest_lbr.bpf.netns import VethPair
    from pytest_lbr.capture.graph import narrow as graph_narrow

    args = parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    chosen = graph_narrow.NARROW_DEPTH
    stats: dict[str, list[int]] = {}
    times: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    errors: dict[str, str] = {}
    with (
        BpfLoader() as bpf,
        VethPair.create() as veth,
        closing(socket.socket(type=socket.SOCK_DGRAM)) as rx,
    ):
        prog = bpf.load(XDP_OBJECT).programs["veth_xdp"]
        prog.attach_xdp(veth.host.name, mode="generic")
        rx.bind((veth.host.addr, PORT))
        rx.settimeout(120)
        tests = variants(prog, veth, rx, depths, stats)
        for name, run in tests.items():
            t0 = time.perf_counter()
            try:
                run()
            except Exception as exc:  # report it in the table, keep measuring the others
                errors[name] = f"{type(exc).__name__}: {exc}"[:2000]
            first[name] = time.perf_counter() - t0
            times[name] = []
        for _ in range(args.runs):
            for name, run in tests.items():
                if name in errors:
                    continue
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        graph_narrow.NARROW_DEPTH = chosen
    save_json(
        args.out,
        {
            "benchmark": "system_scope",
            "kernel": os.uname().release,
            "depth": chosen,
            "seconds": times,
            "first": first,
            "errors": errors,
            "stats": stats,
            "ratios": {n: ratio(times[n], times["untraced"]) for n in times if n != "untraced"},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
