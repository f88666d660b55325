"""The live selftest: load the test program, trace it with each backend, judge the records.

`run_selftest()` gathers every record the verdicts of `pytest_lbr.selftest.verdicts`
need and returns a `Bundle`; `write_bundle()` writes it as JSON and text. Where the
LBR cannot work, each LBR item is "not available" with the probe's reason and the
rest (JIT lines, the graph backend) still runs.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_lbr.capture import probe
from pytest_lbr.kernel.perf import BRANCH_FILTERS
from pytest_lbr.model import Trace
from pytest_lbr.selftest import facts as _facts
from pytest_lbr.selftest import program as _program
from pytest_lbr.selftest.verdicts import (
    FAIL,
    Result,
    agreement,
    filter_kinds,
    graph_calls,
    jit_lines,
    lbr_presence,
    not_available,
    snapshot_depth,
    trimming,
    wasted_entries,
)
from pytest_lbr.tracer import Tracer

__all__ = ["BUNDLE_JSON", "BUNDLE_TEXT", "LBR_ITEMS", "Bundle", "run_selftest", "write_bundle"]

BUNDLE_JSON, BUNDLE_TEXT = "selftest.json", "selftest.txt"
#: The items that need LBR records, in the order they are reported.
LBR_ITEMS = (
    "snapshot depth",
    "wasted entries",
    *(f"filter {f}" for f in BRANCH_FILTERS),
    "trimming",
    "backends agree",
)


@dataclass
class Bundle:
    """Everything the selftest found: where it ran and every result."""

    environment: dict[str, Any]
    results: list[Result] = field(default_factory=list)
    doctor: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if r.status == FAIL]

    def text(self) -> str:
        """The report a person reads: environment, doctor, one line per result."""
        env = self.environment
        lines = [
            f"pytest-lbr selftest {env.get('pytest_lbr', '')}: kernel {env.get('kernel')} "
            f"{env.get('machine')}, CPU {env.get('cpu_model') or 'unknown'}",
        ]
        lines += [f"doctor: {line}" for d in self.doctor for line in d.splitlines()[:1]]
        lines += [str(r) for r in self.results]
        counts = {s: sum(r.status == s for r in self.results) for s in ("pass", "fail")}
        na = len(self.results) - counts["pass"] - counts["fail"]
        lines.append(f"=> {counts['pass']} passed, {counts['fail']} failed, {na} not available")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "doctor": self.doctor,
            "results": [r.to_json() for r in self.results],
        }


def write_bundle(bundle: Bundle, out_dir: Path) -> tuple[Path, Path]:
    """Write `selftest.json` and `selftest.txt` into `out_dir` (created); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, txt = out_dir / BUNDLE_JSON, out_dir / BUNDLE_TEXT
    js.write_text(json.dumps(bundle.to_json(), indent=1) + "\n", encoding="utf-8")
    txt.write_text(bundle.text(), encoding="utf-8")
    return js, txt


def _environment(facts: _facts.LbrFacts, lbr_reason: str) -> dict[str, Any]:
    from importlib import metadata

    from pytest_lbr.bpf.libbpf import libbpf_version

    try:
        version = metadata.version("pytest-lbr")  # the installed distribution's
    except metadata.PackageNotFoundError:
        version = "not installed"

    try:
        libbpf = ".".join(map(str, libbpf_version() or ())) or "< 0.6"
    except OSError as exc:
        libbpf = f"not loadable: {exc}"
    uname = os.uname()
    return {
        "pytest_lbr": version,
        "kernel": uname.release,
        "kernel_version": uname.version,
        "machine": uname.machine,
        "python": platform.python_version(),
        "libbpf": libbpf,
        "cpu_model": facts.cpu_model,
        "lbr_facts": facts.summary(),
        "caps_branches": facts.caps_branches,
        "cpu_flags": list(facts.cpu_flags),
        "dmesg_lbr_depth": facts.dmesg_depth,
        "lbr_probe": lbr_reason or "available",
        "config": _facts.kernel_config(),
    }


def run_selftest(
    vmlinux: str | None = None,
    doctor: Callable[[], Iterable[object]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Bundle:
    """Run every check here and return the bundle (nothing is written).

    `doctor`, when given, returns the `pytest-lbr doctor` checks, recorded in the
    bundle as they print; `progress` hears each result as it is decided.
    """
    say = progress or (lambda _: None)
    from pytest_lbr.bpf.libbpf import libbpf_messages

    facts = _facts.lbr_facts()
    with libbpf_messages():  # the probe's reason says it; libbpf's chatter would not
        cap = probe("lbr")
    bundle = Bundle(_environment(facts, cap.reason))
    if doctor is not None:
        bundle.doctor = [str(c) for c in doctor()]

    def add(result: Result) -> None:
        bundle.results.append(result)
        say(str(result))

    add(lbr_presence(facts, cap.reason))
    try:
        prog = _program.load_program()
    except OSError as exc:
        why = f"the test program does not load: {exc}"
        for name in ("JIT lines", "graph backend", *LBR_ITEMS):
            add(Result(name, FAIL, why) if os.geteuid() == 0 else not_available(name, why))
        return bundle
    with prog:
        symbol = _program.NAME
        try:
            symbol = _jit_lines(prog, vmlinux, add)
        except Exception as exc:  # a check must answer, not end the selftest
            add(_crashed("JIT lines", exc))
        graph: Tracer | None = None
        try:
            graph = _graph(prog, symbol, vmlinux, add)
        except Exception as exc:
            add(_crashed("graph backend", exc))
        try:
            if not cap.available:
                for name in LBR_ITEMS:
                    add(not_available(name, cap.reason))
                return bundle
            done = len(bundle.results)
            try:
                _lbr(prog, symbol, facts, graph, vmlinux, add)
            except Exception as exc:
                decided = {r.name for r in bundle.results[done:]}
                for name in LBR_ITEMS:
                    if name not in decided:
                        add(_crashed(name, exc))
        finally:
            if graph is not None:
                graph.close()
    return bundle


def _crashed(name: str, exc: Exception) -> Result:
    return Result(name, FAIL, f"the check failed to run: {type(exc).__name__}: {exc}")


def _jit_lines(prog: _program.SelftestProgram, vmlinux: str | None, add: Any) -> str:
    """Check the lines of the program's helper calls; return the program's symbol as the
    symbolizer names it."""
    from pytest_lbr.symbols import get_symbolizer

    sites = _program.call_sites(prog.fd, get_symbolizer(vmlinux))
    add(jit_lines(sites, _program.CALLEES, _program.FILE))
    return next((s.location.symbol for s in sites if s.location.symbol), _program.NAME)


def _graph(
    prog: _program.SelftestProgram, symbol: str, vmlinux: str | None, add: Any
) -> Tracer | None:
    """Trace one run with the graph backend; the tracer when it works (for agreement)."""
    tracer = Tracer(backend="graph", vmlinux=vmlinux)
    if not tracer.available:
        add(not_available("graph backend", tracer.reason))
        tracer.close()
        return None
    with tracer.trace(prog) as trace:
        prog.run()
    add(graph_calls(trace, symbol, _program.CALLEES))
    return tracer


def _lbr(
    prog: _program.SelftestProgram,
    symbol: str,
    facts: _facts.LbrFacts,
    graph: Tracer | None,
    vmlinux: str | None,
    add: Any,
) -> None:
    """The LBR items: one run traced by both backends at once, then one run per filter."""
    from pytest_lbr.capture.hooks.tracer_object import tracer_layout

    lbr = Tracer(backend="lbr", vmlinux=vmlinux)
    with ExitStack() as stack:
        stack.callback(lbr.close)
        graph_trace: Trace | None = None
        if graph is not None:
            graph_trace = stack.enter_context(graph.trace(prog))
        # Armed innermost: the LBR snapshot is taken closest to the program's run.
        with lbr.trace(prog) as lbr_trace:
            prog.run()
    raw = [h.raw_branches for h in lbr_trace.hits]
    depth = tracer_layout().max_entries
    expected = min(facts.caps_branches, depth) if facts.caps_branches else None
    add(snapshot_depth([len(r) for r in raw], expected))
    add(wasted_entries(raw, symbol))
    for name in BRANCH_FILTERS:
        with Tracer(backend="lbr", filter=name, vmlinux=vmlinux) as t, t.trace(prog) as ft:
            prog.run()
        add(filter_kinds(name, [b for h in ft.hits for b in h.raw_branches]))
    if lbr_trace.hits:
        first = lbr_trace.hits[0]
        add(trimming(first.raw_branches, first.branches, symbol))
    else:
        add(Result("trimming", FAIL, "the LBR trace of the program has no hit"))
    if graph_trace is None:
        add(not_available("backends agree", "the graph backend is not available here"))
    else:
        add(agreement(lbr_trace, graph_trace, symbol))
