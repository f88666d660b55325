"""Benchmark (guest): where one graph trace of a BPF program spends its time.

The same program (tests/bpf/build/xdp_helpers.bpf.o, loaded once) traced
`--runs` times on one graph session, after one warm-up trace, twice: with the
session keeping the program's fexit hook (`program_exits.KEPT_PROGRAMS = 4`,
the default, for a program of a `BpfObject`) and with
`KEPT_PROGRAMS = 0` (a hook loaded, verified, attached and closed per trace:
what a program loaded per test, or by another loader, pays). Per
trace: the whole trace, `HookSet` steps (open, load, attach, arm, drain,
close) and `parse_trace`, seconds, with the records parsed.

    python bench/trace_phases.py [--runs 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, save_json  # noqa: E402
from pertest import PACKET, XDP_OBJECT, XDP_PASS  # noqa: E402

__all__ = ["main", "parse_args"]

#: HookSet methods timed (each the sum over a trace).
HOOK_STEPS = ("attach", "_open", "_load", "set_armed", "drain", "close")
#: The session's function tracer instance: arming, disarming, reading back (consumed).
INSTANCE_STEPS = ("set_pids", "arm", "disarm", "read_pipe", "lost")


@contextmanager
def _timed(owner: Any, name: str, into: dict[str, float]) -> Iterator[None]:
    """Add the time of every call of `owner.name` to `into[name]` while inside."""
    orig: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            into[name] = into.get(name, 0.0) + time.perf_counter() - t0

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, orig)


def _phases(prog: Any, runs: int, kept: int) -> dict[str, float]:
    """Mean seconds per trace of each step, with KEPT_PROGRAMS = `kept`."""
    from pytest_lbr import tracer as tracer_module
    from pytest_lbr.capture.graph import backend as graph
    from pytest_lbr.capture.graph.hits import HitBuilder
    from pytest_lbr.capture.hooks import program_exits
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.kernel.tracefs import Instance
    from pytest_lbr.tracer import Tracer

    steps: dict[str, float] = {}
    records = [0]
    parse = graph.parse_trace

    def counted(text: str) -> Any:
        out = parse(text)
        records[0] += len(out)
        return out

    old_kept, program_exits.KEPT_PROGRAMS = program_exits.KEPT_PROGRAMS, kept
    tracer = Tracer(backend="graph")
    try:
        with tracer.trace(prog):  # warm-up: the function tracer's set-up, the first hook
            prog.run(data=PACKET)
        graph.parse_trace = counted
        with (
            _timed(graph, "parse_trace", steps),
            _all_timed(HookSet, HOOK_STEPS, steps),
            _all_timed(Instance, INSTANCE_STEPS, steps),
            _timed(HitBuilder, "build", steps),
            _timed(tracer_module, "add_source_lines", steps),
        ):
            t0 = time.perf_counter()
            for _ in range(runs):
                with tracer.trace(prog) as trace:
                    res = prog.run(data=PACKET)
                if res.retval != XDP_PASS or [h.retval for h in trace.hits] != [XDP_PASS]:
                    raise RuntimeError(f"bad trace: {res.retval}, {trace.hits}")
            total = time.perf_counter() - t0
    finally:
        graph.parse_trace = parse
        program_exits.KEPT_PROGRAMS = old_kept
        tracer.close()
    out = {name: secs / runs for name, secs in steps.items()}
    out["trace"] = total / runs
    out["records"] = records[0] / runs
    return out


@contextmanager
def _all_timed(owner: Any, names: Sequence[str], into: dict[str, float]) -> Iterator[None]:
    if not names:
        yield
        return
    with _timed(owner, names[0], into), _all_timed(owner, names[1:], into):
        yield


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=5)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the steps and write its JSON."""
    import os

    from pytest_lbr.bpf import BpfLoader

    args = parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with BpfLoader() as bpf:
        prog = bpf.load(XDP_OBJECT).programs["xdp_helpers"]
        for label, kept in (("hook kept", 4), ("hook per trace", 0)):
            results[label] = r = _phases(prog, args.runs, kept)
            steps = ", ".join(f"{k} {v:.3f}" for k, v in r.items() if k not in ("trace", "records"))
            print(
                f"{os.uname().release} {label}: {r['trace']:.3f} s per trace ({steps}); "
                f"{r['records']:.0f} records"
            )
    if args.out:
        save_json(args.out, {"benchmark": "trace_phases", "per_trace": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
