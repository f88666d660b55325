"""Benchmark (guest): what naming a graph trace costs with each call's own line.

The graph backend knows a call by its return address; a call's file:line is read
from the byte before it (`Capabilities.call_source_is_return`), one more symbol
lookup per distinct call site. One graph trace of `kfunc:vfs_write` (writes to
/dev/null and a file) is taken once and saved; then `add_source_lines` names its
hits in fresh processes (a cold symbolizer each: no line cache, as in the
guests), with and without the call lines, in turns.

    python bench/call_lines.py [--runs 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, fmt_ratio, fmt_stat, ratio, save_json  # noqa: E402

__all__ = ["main", "parse_args"]

WRITES = 200


def _take_trace(path: Path) -> tuple[int, int]:
    """Trace vfs_write over some writes; save the hits; (hits, call branches)."""
    from pytest_lbr.model import CALL_KINDS
    from pytest_lbr.tracer import Tracer

    with Tracer(backend="graph") as tracer, tempfile.TemporaryFile() as f:
        with tracer.trace("kfunc:vfs_write") as trace:
            null = os.open("/dev/null", os.O_WRONLY)
            try:
                for _ in range(WRITES):
                    os.write(null, b"x")
                    f.write(b"y" * 4096)
                    f.flush()
            finally:
                os.close(null)
    path.write_bytes(pickle.dumps(trace.hits))
    calls = sum(1 for h in trace.hits for b in h.branches if b.kind in CALL_KINDS)
    return len(trace.hits), calls


def _name_once(path: Path, call_lines: bool) -> float:
    """Seconds `add_source_lines` takes over the saved hits in this (fresh) process."""
    from pytest_lbr.tracer import add_source_lines

    hits = pickle.loads(path.read_bytes())
    t0 = time.perf_counter()
    add_source_lines(hits, call_source_is_return=call_lines)
    return time.perf_counter() - t0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, runs=5)
    parser.add_argument("--name-once", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--call-lines", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Take the trace, name it cold with and without call lines in turns, print."""
    args = parse_args(argv)
    if args.name_once:
        print(_name_once(args.name_once, args.call_lines))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "hits.pickle"
        hits, calls = _take_trace(saved)
        times: dict[str, list[float]] = {"return address's line": [], "call's own line": []}
        for _ in range(args.runs):
            for label, flag in (("return address's line", False), ("call's own line", True)):
                cmd = [sys.executable, __file__, "--name-once", str(saved)]
                out = subprocess.run(
                    cmd + (["--call-lines"] if flag else []),
                    check=True,
                    capture_output=True,
                    text=True,
                )
                times[label].append(float(out.stdout.split()[-1]))
    r = ratio(times["call's own line"], times["return address's line"])
    print(f"{os.uname().release}: one trace of {hits} hits, {calls} call branches, named cold:")
    for label, values in times.items():
        print(f"  {label}: {fmt_stat(values)} s")
    print(f"  ratio: {fmt_ratio(r)}")
    if args.out:
        save_json(
            args.out,
            {"benchmark": "call_lines", "hits": hits, "calls": calls, "seconds": times, "ratio": r},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
