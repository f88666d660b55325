"""Benchmark (guest): hits per second through the LBR tracer's ring buffer, and loss accounting.

The traced program is tests/bpf/build/xdp_helpers.bpf.o's `xdp_helpers`, hooked
by the LBR tracer (fexit on the program, `HookSet(snapshot=True)`: full-size
records, although the TCG guest's snapshot is empty). Hits are driven with
`prog.run(repeat=N)` (BPF_PROG_TEST_RUN). The truth comes from the program
itself: it counts every packet in its `counts` map (under the packet's first
byte, which the program rewrites, so all keys are summed), so

    true loss = counts delta (target executions) - hits delivered to user space

and every run checks `lost` (the tracer's counter, what `trace.lost` reports)
against it.

Three parts:

1. burst -- what `Tracer.trace` sees: nothing reads the ring buffer until the
   block ends, so loss depends on the hit count, not the rate (the buffer
   holds LBR_RINGBUF_SIZE / record size hits);
2. stream -- a thread reads the ring buffer while the program runs (as a
   long trace would need): the unpaced rate, then paced rates halving until
   no record is lost; the highest loss-free rate is the throughput;
3. 10x -- the same stream at ten times that rate (or as fast as the guest
   goes, if that is less), where records must be lost and counted.

    python bench/throughput.py [--runs 3] [--hits 40000] [--out FILE]
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, save_json, stat  # noqa: E402
from pertest import PACKET, XDP_OBJECT  # noqa: E402

__all__ = ["Session", "main", "parse_args", "run_session"]

BURSTS = (1000, 4000, 5000, 6000, 10000, 50000)


class Session:
    """One traced stretch: hits attempted (truth), delivered, and what `lost` says."""

    def __init__(self, offered_rate: float | None, mode: str) -> None:
        self.mode = mode
        self.offered_rate = offered_rate
        self.truth = 0
        self.delivered = 0
        self.lost = 0
        self.seconds = 0.0

    @property
    def true_loss(self) -> int:
        """Executions of the target that never reached user space."""
        return self.truth - self.delivered

    @property
    def accounted(self) -> bool:
        """Does the tracer's lost counter equal the true loss?"""
        return self.lost == self.true_loss

    def as_dict(self) -> dict[str, Any]:
        """JSON form, with the derived rates."""
        secs = self.seconds or float("nan")
        return {
            "mode": self.mode,
            "offered_rate": self.offered_rate,
            "truth": self.truth,
            "delivered": self.delivered,
            "lost": self.lost,
            "true_loss": self.true_loss,
            "accounted": self.accounted,
            "seconds": self.seconds,
            "attempted_per_s": self.truth / secs,
            "delivered_per_s": self.delivered / secs,
        }


def _count(counts: Any) -> int:
    # Every key: a repeated test run reuses the packet the program rewrote, so after
    # the first run it is counted under another first byte.
    return sum(int(struct.unpack("<Q", v)[0]) for _, v in counts.items())


def run_session(
    prog: Any, counts: Any, hits: int, *, rate: float | None = None, stream: bool = True
) -> Session:
    """Drive `hits` runs of `prog` (at `rate` per second, or flat out) under the tracer."""
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.targets import parse_targets

    s = Session(rate, "stream" if stream else "burst")
    done = threading.Event()
    got = [0]
    with HookSet(parse_targets([prog]), snapshot=True) as hooks:

        def reader() -> None:
            while not done.is_set():
                got[0] += len(hooks.poll(20))

        thread = threading.Thread(target=reader, daemon=True) if stream else None
        before = _count(counts)
        if thread:
            thread.start()
        t0 = time.perf_counter()
        sent = 0
        # Pacing: batches of ~10 ms worth of hits, then sleep to the schedule.
        batch = hits if rate is None else max(1, int(rate / 100))
        while sent < hits:
            n = min(batch, hits - sent)
            prog.run(data=PACKET, repeat=n)
            sent += n
            if rate is not None:
                ahead = t0 + sent / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        s.seconds = time.perf_counter() - t0
        done.set()
        if thread:
            thread.join()
        s.truth = _count(counts) - before
        s.delivered = got[0] + len(hooks.drain())
        s.lost = hooks.lost
    return s


def _paced_hits(hits: int, rate: float, burst: list[Session]) -> int:
    """Hits for a paced run: at most ~8 s of them, but 3x what the buffer holds unread,
    so a slow reader shows up as loss rather than hiding in the buffer."""
    capacity = max((s.truth for s in burst if s.true_loss == 0), default=0)
    return max(3 * capacity, min(hits, int(rate * 8)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=3)
    ap.add_argument("--hits", type=int, default=40000, help="hits per streamed run")
    ap.add_argument("--steps", type=int, default=6, help="most halvings of the rate")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    from pytest_lbr.bpf import BpfLoader

    args = parse_args(argv)
    sessions: list[Session] = []
    out: dict[str, Any] = {"benchmark": "throughput", "hits": args.hits}
    with BpfLoader() as bpf:
        obj = bpf.load(XDP_OBJECT)
        prog, counts = obj.programs["xdp_helpers"], obj.maps["counts"]
        prog.run(data=PACKET, repeat=10)  # warm-up, untraced
        burst = [run_session(prog, counts, n, stream=False) for n in BURSTS]
        sessions += burst
        out["burst"] = [s.as_dict() for s in burst]
        clean = [s.truth for s in burst if s.true_loss == 0]
        out["burst_capacity"] = max(clean) if clean else 0

        flat = [run_session(prog, counts, args.hits) for _ in range(args.runs)]
        sessions += flat
        out["flat_out"] = [s.as_dict() for s in flat]
        top = stat([s.truth / s.seconds for s in flat]).median
        out["max_attempted_per_s"] = top

        best: float | None = top if all(s.true_loss == 0 for s in flat) else None
        rate = top
        search = []
        for _ in range(args.steps):
            if best is not None:
                break
            rate /= 2
            s = run_session(prog, counts, _paced_hits(args.hits, rate, burst), rate=rate)
            sessions.append(s)
            search.append(s.as_dict())
            if s.true_loss == 0:
                best = rate
        out["search"] = search
        out["loss_free_rate"] = best
        if best is not None:
            # Confirm the loss-free rate and measure 10x it, `runs` times each.
            n = _paced_hits(args.hits, best, burst)
            at = [run_session(prog, counts, n, rate=best) for _ in range(args.runs)]
            ten_rate = 10 * best
            paced = ten_rate if ten_rate < top else None  # None: flat out is all there is
            ten = [run_session(prog, counts, args.hits, rate=paced) for _ in range(args.runs)]
            sessions += at + ten
            out["at_rate"] = [s.as_dict() for s in at]
            out["ten_x"] = [s.as_dict() for s in ten]
            out["ten_x_reachable"] = paced is not None
    out["accounted_runs"] = sum(s.accounted for s in sessions)
    out["total_runs"] = len(sessions)
    out["unaccounted"] = [s.as_dict() for s in sessions if not s.accounted]
    save_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
