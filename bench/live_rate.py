"""Benchmark (guest): how fast a live `--all` graph trace can be fed without loss.

What `pytest-lbr trace --all kfunc:vfs_write --backend graph` runs (`LiveTrace`,
scope "system", polled every 0.1 s) while a background writer, another process,
calls write(2) on /dev/null at a fixed rate for `--seconds`. The truth is the
writer's own count of its writes; a rate is loss-free when every one of them
came back as a hit of the writer's pid and the capture counted nothing lost.

Two ways of recording, each at rising rates until one loses:

* narrowed -- what a system-wide trace of kernel functions records since issue 27:
  the targets' call graph only (`capture/graph/narrow.py`);
* every function -- what it recorded before: every function of every task
  (narrowing switched off), the mode the issue 30 limit (8-13k records/s
  parsed under TCG) was stated for.

Records per second are counted from the function tracer's records of the
writer's hits (each hit's calls and returns, plus its own entry).

    python bench/live_rate.py [--rates 250,1000,4000] [--seconds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, machine_info, save_json  # noqa: E402

__all__ = ["main", "parse_args", "run_rate"]

TARGET = "kfunc:vfs_write"

#: A writer at `rate` writes/s for `seconds`, paced in 10 ms slices. It reports its
#: count and time through shared memory (`REPORT`), not with a write(2) of its own
#: that the trace would count.
WRITER = """
import mmap, os, struct, sys, time
rate, seconds, report = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
fd = os.open("/dev/null", os.O_WRONLY)
with open(report, "r+b") as f:
    shared = mmap.mmap(f.fileno(), REPORT.size)
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic(); n = 0
while True:
    now = time.monotonic() - start
    if now >= seconds:
        break
    due = int(rate * now)
    while n < due:
        os.write(fd, b"x")
        n += 1
    time.sleep(0.01)
REPORT.pack_into(shared, 0, n, time.monotonic() - start)
"""

#: The PMU each backend runs on: the LBR tracer on software perf events (no PMU
#: under TCG, so no branch records: its hits carry the call and the return value).
PMU = {"graph": "hardware", "lbr": "software"}

#: What the writer reports: writes made, seconds it wrote for.
REPORT = struct.Struct("<Qd")


@contextmanager
def _every_function() -> Iterator[None]:
    """Narrowing off: a system-wide trace records every function (before issue 27)."""
    from pytest_lbr.capture.graph import backend as graph

    def refuse(targets: Any) -> Any:
        raise OSError("narrowing switched off by the benchmark")

    orig = graph.narrowing
    graph.narrowing = refuse
    try:
        yield
    finally:
        graph.narrowing = orig


def run_rate(rate: float, seconds: float, backend: str = "graph") -> dict[str, Any]:
    """One live trace with the writer at `rate` writes/s: truth, hits, lost, records/s.

    `backend` "graph", or "lbr" (the LBR tracer on software perf events: no PMU here).
    """
    from pytest_lbr.live import LiveTrace

    with tempfile.NamedTemporaryFile() as report:
        report.write(bytes(REPORT.size))
        report.flush()
        writer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import struct; REPORT = struct.Struct({REPORT.format!r})\n" + WRITER,
                str(rate),
                str(seconds),
                report.name,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None
        try:
            assert writer.stdout.readline() == "ready\n"
            # Counted, not kept: a live reader prints its hits and drops them (a
            # heap of every hit would make the collector's passes grow with the run).
            hits = records = 0
            with LiveTrace([TARGET], backend=backend, pmu=PMU[backend]) as live:
                gc.freeze()  # as `pytest-lbr trace` does once armed
                writer.stdin.write("go\n")
                writer.stdin.flush()
                t0 = time.monotonic()
                for batch in live.batches(lambda: writer.poll() is not None):
                    mine = [h for h in batch if h.pid == writer.pid]
                    hits += len(mine)
                    records += sum(len(h.raw_branches) + 1 for h in mine)
                elapsed = time.monotonic() - t0
                lost = live.lost
                notes = live.notes
        finally:
            writer.kill()
            writer.wait()
        report.seek(0)
        count, wrote_for = REPORT.unpack(report.read(REPORT.size))
    truth = count
    return {
        "backend": backend,
        "rate": rate,
        "truth": truth,
        "hits": hits,
        "lost": lost,
        "loss_free": hits == truth and lost == 0,
        "writes_per_s": truth / float(wrote_for),
        "records": records,
        "records_per_s": records / float(wrote_for),
        "records_per_hit": records / hits if hits else 0.0,
        "writer_rate_met": truth >= 0.95 * rate * seconds,
        "seconds": elapsed,
        # The reader kept pace: done within a poll or so of the writer, not
        # reading a backlog the buffer held.
        "kept_pace": elapsed <= float(wrote_for) + 1.0,
        "notes": notes,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=1)
    ap.add_argument("--rates", default="250,1000,2000,4000,8000", help="writes/s to try, rising")
    ap.add_argument(
        "--every-rates",
        default="0,50,250",
        help="writes/s to try with every function recorded (0: the idle guest alone)",
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="how long the writer writes")
    ap.add_argument("--modes", default="narrowed,every function", help="which recordings")
    ap.add_argument("--backend", default="graph", choices=sorted(PMU), help="which backend traces")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run each mode at rising rates until one loses; print and save the rows."""
    import os

    args = parse_args(argv)
    rows: dict[str, list[dict[str, Any]]] = {}
    for mode in args.modes.split(","):
        rows[mode] = []
        every = mode == "every function"
        rates = args.every_rates if every else args.rates
        with _every_function() if every else nullcontext():
            for rate in [float(r) for r in rates.split(",")]:
                row = run_rate(rate, args.seconds, args.backend)
                rows[mode].append(row)
                print(
                    f"{os.uname().release} {mode} at {rate:.0f} writes/s: {row['hits']}/"
                    f"{row['truth']} hits, lost {row['lost']}, "
                    f"{row['records_per_s']:.0f} records/s "
                    f"({row['records_per_hit']:.1f} per hit), {args.backend}, took "
                    f"{row['seconds']:.1f} s",
                    flush=True,
                )
                if not row["loss_free"]:
                    break
    save_json(args.out, {"benchmark": "live_rate", "machine": machine_info(), "modes": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
