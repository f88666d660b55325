"""Benchmark (guest): what tracing adds to one test.

The test: load tests/bpf/build/xdp_helpers.bpf.o with `BpfLoader`, run
`xdp_helpers` once on a packet, close. Traced, the run sits inside a trace of
that one program (arm, run, disarm, collect, symbolize), on one `Tracer` per
backend as the plugin shares one per session:

* graph -- `Tracer(backend="graph")`: what a user gets in this TCG guest (no
  PMU, so "auto" picks graph). Its first test turns the function tracer on,
  the later ones only record; each test's new program gets a new fexit hook
  (for its return value), released when the test closes the object;
* graph, set up per test -- a new `Tracer` per test, closed after it: the
  function tracer turned on and off around every test (what every test paid
  before the session kept it on);
* untraced, graph on -- the untraced test while the session's function
  tracer stays on between traces (recording nothing);
* lbr (software events) -- `Tracer(backend="lbr", pmu="software")`: the LBR
  path (fexit on the program, ring buffer, decoding, symbolization) on
  software perf events, since the guest has no PMU: the records carry no
  branches, so this is the cost of the machinery alone;
* "..., program loaded once" -- the same on a program loaded once for the run
  (a session- or module-scoped fixture): the session keeps the program's
  hook while its object is open (`program_exits`), so a trace only switches it
  on and off. Against "untraced, program loaded once" (one run of the
  program, no load) a ratio means little; the table gives it against the
  whole untraced test like every other row.

One unmeasured warm-up of each variant first (imports, probes, the graph
tracer's set-up: the "first test" column), then `--runs` interleaved runs;
the figures are per-test seconds a suite sees after its first traced test.
"untraced" runs before anything is traced, so every ratio is against a
test of a session that never traced.

    python bench/pertest.py [--runs 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, add_common_args, ratio, save_json  # noqa: E402

__all__ = ["PACKET", "XDP_OBJECT", "lbr_trace", "main", "parse_args", "variants"]

XDP_OBJECT = REPO / "tests" / "bpf" / "build" / "xdp_helpers.bpf.o"
#: An Ethernet-sized packet whose first byte is counted (not the drop byte 0xff).
PACKET = bytes([0x01]) + bytes(63)
XDP_PASS = 2


@contextmanager
def lbr_trace(prog: Any, scope: str = "process") -> Iterator[Any]:
    """`Tracer.trace(prog, scope=scope)` on the LBR backend, with software perf events
    (no PMU here)."""
    from pytest_lbr.capture import Scope
    from pytest_lbr.capture.lbr.backend import LbrCapture
    from pytest_lbr.kernel.perf import software_branch_events
    from pytest_lbr.model import Trace
    from pytest_lbr.targets import parse_targets

    capture = LbrCapture(
        parse_targets([prog]),
        check=False,
        open_events=software_branch_events,
        scope=Scope.of(scope),
    )
    trace = Trace()
    try:
        capture.start()
        yield trace
        trace.__dict__.update(capture.stop().__dict__)
    finally:
        capture.close()


def _test(trace_cm: Callable[[Any], Any] | None) -> Callable[[], None]:
    from pytest_lbr.bpf import BpfLoader

    def body() -> None:
        with BpfLoader() as bpf:
            _run_once(bpf.load(XDP_OBJECT).programs["xdp_helpers"], trace_cm)

    return body


def _test_loaded_once(prog: Any, trace_cm: Callable[[Any], Any] | None) -> Callable[[], None]:
    """A test that runs a program the session loaded once (a module- or session-scoped
    fixture), traced or not."""

    def body() -> None:
        _run_once(prog, trace_cm)

    return body


def _run_once(prog: Any, trace_cm: Callable[[Any], Any] | None) -> None:
    """Run `prog` once on PACKET, inside `trace_cm(prog)` if given; one pass, one hit."""
    if trace_cm is None:
        res, hits = prog.run(data=PACKET), 1
    else:
        with trace_cm(prog) as trace:
            res = prog.run(data=PACKET)
        hits = len(trace.hits)
    if res.retval != XDP_PASS or hits != 1:
        raise RuntimeError(f"bad test run: retval {res.retval}, {hits} hits (want 1)")


def variants() -> dict[str, Callable[[], None]]:
    """name -> one whole test."""
    from pytest_lbr.bpf import BpfLoader
    from pytest_lbr.tracer import Tracer

    graph = Tracer(backend="graph")
    lbr = Tracer(backend="lbr", pmu="software")
    # Loaded for the whole run, as a session-scoped fixture would (never closed:
    # the process ends with the benchmark).
    kept = BpfLoader().load(XDP_OBJECT).programs["xdp_helpers"]

    @contextmanager
    def graph_per_test(prog: Any) -> Iterator[Any]:
        with Tracer(backend="graph") as tracer, tracer.trace(prog) as trace:
            yield trace

    return {
        "untraced": _test(None),
        "untraced, program loaded once": _test_loaded_once(kept, None),
        "lbr (software events)": _test(lambda p: lbr.trace(p)),
        "lbr (software events), program loaded once": _test_loaded_once(
            kept, lambda p: lbr.trace(p)
        ),
        "graph, set up per test": _test(graph_per_test),
        "graph": _test(lambda p: graph.trace(p)),
        "untraced, graph on": _test(None),
        "graph, program loaded once": _test_loaded_once(kept, lambda p: graph.trace(p)),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=5)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON (after each phase, so a guest crash keeps the first)."""
    args = parse_args(argv)
    tests = variants()
    first: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name in tests}
    errors: dict[str, str] = {}

    def save() -> None:
        save_json(
            args.out,
            {
                "benchmark": "pertest",
                "kernel": os.uname().release,
                "seconds": times,
                "first": first,
                "errors": errors,
                "ratios": {n: ratio(times[n], times["untraced"]) for n in tests if n != "untraced"},
            },
        )

    # The graph phases go last: see GUEST_BENCHMARKS in guest_bench.py.
    phases = (
        [
            "untraced",
            "untraced, program loaded once",
            "lbr (software events)",
            "lbr (software events), program loaded once",
        ],
        ["graph, set up per test"],
        ["graph", "untraced, graph on", "graph, program loaded once"],
    )
    for phase in phases:
        for name in phase:
            t0 = time.perf_counter()
            try:
                tests[name]()
            except Exception as exc:  # report it in the table, keep measuring the others
                errors[name] = f"{type(exc).__name__}: {exc}"
            first[name] = time.perf_counter() - t0
        for _ in range(args.runs):
            for name in phase:
                if name in errors:
                    continue
                t0 = time.perf_counter()
                tests[name]()
                times[name].append(time.perf_counter() - t0)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
