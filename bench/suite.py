"""bench/run: every benchmark this machine can run, then bench/RESULTS.md.

Host: `pytest --lbr` start-up (bench/startup.py) and symbolization
(bench/symbolize.py, which also writes bench/RESULTS-symbolize.md).
Guest (6.12 under pytest-lbr vm): per-test cost, graph overhead, ring buffer
throughput and loss accounting, mass attach vs bpftrace (bench/guest_bench.py
runs them there). Every part writes JSON into the results directory; the
report is built from those files, so `--report-only` re-renders it.

    bench/run [--runs 3] [--results DIR] [--skip-host] [--skip-guest] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    fmt_ratio,
    fmt_stat,
    load_json,
    machine_info,
    markdown_table,
    ratio,
    verdict,
)

__all__ = ["main", "parse_args", "parse_symbolize_table", "render"]

BENCH = REPO / "bench"
RESULTS_MD = BENCH / "RESULTS.md"
SYMBOLIZE_MD = BENCH / "RESULTS-symbolize.md"
#: bench/soak.py's last run (it runs alone, not in bench/run): --out and --markdown.
SOAK_JSON, SOAK_MD = BENCH / "RESULTS-soak.json", BENCH / "RESULTS-soak.md"
#: The real kernel bisection's record (issue 16; a session by hand, not in bench/run).
BISECT_MD = BENCH / "RESULTS-bisect.md"
#: bench/coverage_cost.py's last run in each guest (its own run, not in bench/run).
COVERAGE_JSON = BENCH / "RESULTS-coverage.json"
#: What --lbr-cov may add to a traced suite's time.
TARGET_COVERAGE = 1.10
#: What --lbr-cov-exact may cost against the traced suite without coverage (issue 51).
TARGET_EXACT = 1.20
PY = sys.executable

#: Targets from issue 7 (ratios measured in the same run).
TARGET_COLD = 1.5  # cold symbolizer <= 1.5x llvm-symbolizer
TARGET_WARM = 20.0  # warm symbolizer >= 20x faster than llvm-symbolizer
TARGET_ATTACH = 0.25  # ~380 functions armed in <= 0.25x bpftrace's time
TARGET_STARTUP = 1.1  # pytest --lbr start-up <= 1.1x plain pytest

#: One line on what limits a missed target (shown only when it is missed).
LIMITS = {
    "cold": "fixed start-up of a cold lookup (open the 600 MB ELF, check its build-id, "
    "start llvm-symbolizer, write the cache) dominates small sets",
    "warm": "a warm lookup still builds Python objects per address (a dict entry, a tuple "
    "per frame chain, ~1 us each): nothing for a trace's few hundred addresses, close to "
    "the line at 100,000 on a loaded machine",
    "attach": "see section 2: what an arm costs beyond glob expansion (tracer load, the "
    "kprobe.multi link, the per-CPU perf events) under TCG",
    "startup": "the plugin imports its session module and trace model at start-up "
    "(a few ms) even without traced tests",
    "loss": "see the throughput table: lost != true loss means the lost counter misses drops",
    "soak": "see section 6: the count that grew, and RSS",
    "coverage": "see section 7: reading each traced program's code and proving its lines",
    "pertest30": "see section 3 and docs/architecture.md: a program loaded per test needs "
    "a new fexit hook per test (its attach target is fixed at load: ~0.017 s under TCG, "
    "about a third of it libbpf opening the object and reusing the session's spare maps, "
    'each reuse an open("/") on the 9p root); the rest is reading, cutting and naming '
    "the trace in Python, and reading the new program's tables",
    "pertest": "see section 3: each trace of a program loads, verifies and attaches the "
    "fexit hook that gives its return value (~0.1-0.2 s under TCG), and reads, parses and "
    "symbolizes the ring buffer's text in Python",
    "pertest54": "measured (timers around each phase, no profiler, 6.12 guest, 2026-11-29 "
    "11:20, 30 traced tests of a program loaded per test, 0.130 s a test; the untraced "
    "test 0.029 s, 0.042 s with the session's function tracer on): the test's own load "
    "of its program 0.052 s (the kernel's work, slower with the tracer on and after "
    "the last test's hook went), the new program's fexit hook 0.021 s (libbpf's open, "
    "the verifier, the trampoline), cutting the records into hits 0.027 s (call-site "
    "searches of callers the tracer did not record 0.017 s), naming 0.015 s, Python's "
    "garbage collector about 0.010 s (0.002 s after gc.freeze(): not done, a library "
    "leaves the process's collector alone); the load and the hook alone are about 2.5x",
    "first54": "the first graph trace turns the function tracer on in its tracefs "
    "instance: about 4 s of kernel text patching under TCG (the writes to tracefs in a "
    "cProfile of the 6.12 guest), before the trace itself",
}
#: Issue 54: per-test bounds, against the untraced test (ratio) or in seconds.
TARGETS_PERTEST_54 = {
    "graph": 3.0,
    "graph, program loaded once": 1.5,
    "lbr (software events)": 2.0,
}
TARGET_FIRST_S = 2.0
#: Issue 14: a traced BPF-program test after the first, graph backend.
TARGET_PERTEST_S, TARGET_PERTEST_X = 0.5, 15.0
#: Issue 30: the same against an untraced test, per backend (variant of bench/pertest.py).
TARGETS_PERTEST_30 = {"graph": 5.0, "lbr (software events)": 2.0}


# -- running ----------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def _run(cmd: list[str], timeout: float) -> int:
    _log(" ".join(cmd))
    try:
        return subprocess.run(cmd, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        _log(f"timed out after {timeout:.0f}s")
        return 124


def run_host(args: argparse.Namespace, results: Path) -> None:
    """Start-up and symbolization, on the host."""
    runs = max(args.runs, 5)
    _run(
        [
            PY,
            str(BENCH / "startup.py"),
            "--runs",
            str(runs),
            "--out",
            str(results / "startup.json"),
        ],
        600,
    )
    if args.skip_symbolize:
        return
    sizes = "32,1000" if args.quick else "32,1000,100000"
    # Imported rather than run as a script so its table lands in the results
    # directory: bench/RESULTS-symbolize.md stays its owner's (with the slow
    # pyelftools-only row, left out here to keep bench/run short).
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import symbolize; symbolize.RESULTS = Path(sys.argv[2]); "
        "sys.argv = ['bench/symbolize.py', *sys.argv[3:]]; symbolize.main()"
    )
    status = _run(
        [
            PY,
            "-c",
            code,
            str(BENCH),
            str(results / "symbolize.md"),
            "--runs",
            str(args.runs),
            "--sizes",
            sizes,
            "--pyelftools-max",
            "0",
        ],
        900,
    )
    (results / "symbolize.status").write_text(f"{status}\n")


def run_guest(args: argparse.Namespace, results: Path) -> None:
    """The guest benchmarks in one boot of `--kernel` (6.12), and the per-test cost
    also in each `--pertest-kernel` (6.1), the guests side by side."""
    runs = str(args.runs)
    quick = args.quick
    config: dict[str, Any] = {
        "args": {
            "pertest": ["--runs", runs],
            "graph_overhead": ["--runs", runs],
            "throughput": ["--runs", runs, "--hits", "20000" if quick else "40000"],
            "attach": ["--runs", runs, "--big-runs", "2"] + (["--glob", "tcp_*"] if quick else []),
        }
    }
    if args.only:
        config["benchmarks"] = args.only.split(",")
    from pytest_lbr.vm import kernel_label

    # pytest-lbr vm gives each kernel its own results subdirectory (PYTEST_LBR_RESULTS),
    # which holds that guest's bench-config.json.
    main = kernel_label(args.kernel)
    others = [k for k in args.pertest_kernel if kernel_label(k) != main]
    if "pertest" not in config.get("benchmarks", config["args"]):
        others = []
    plans = {
        main: config,
        **{kernel_label(k): {**config, "benchmarks": ["pertest"]} for k in others},
    }
    for label, plan in plans.items():
        guest = results / label
        guest.mkdir(parents=True, exist_ok=True)
        (guest / "bench-config.json").write_text(json.dumps(plan, indent=1))
        for name in plan.get("benchmarks", plan["args"]):
            (guest / f"{name}.json").unlink(missing_ok=True)
    for name in config.get("benchmarks", config["args"]):
        (results / f"{name}.json").unlink(missing_ok=True)
    for label in plans:
        (results / f"pertest@{label}.json").unlink(missing_ok=True)
    kernels = [a for k in [args.kernel, *others] for a in ("--kernel", k)]
    status = _run(
        [
            str(Path(sys.executable).parent / "pytest-lbr"),
            "vm",
            *kernels,
            "--results",
            str(results),
            "--boot-timeout",
            "900",
            "--timeout",
            "3000",  # bpftrace's kfunc: runs alone take 20+ minutes under TCG
            "--",
            str(BENCH / "guest_bench.py"),
            "-s",
            "-q",
        ],
        3600,
    )
    for label, plan in plans.items():
        for name in plan.get("benchmarks", plan["args"]):
            src = results / label / f"{name}.json"
            if not src.exists():
                continue
            if label == main:
                shutil.copy(src, results / f"{name}.json")
            if name == "pertest":
                shutil.copy(src, results / f"pertest@{label}.json")
    (results / "guest.status").write_text(f"{status}\n")


# -- reading results ----------------------------------------------------------------

_CELL = re.compile(r"([\d.,]+)(?: \(([\d.,]+)-([\d.,]+)\)| \(1 run\))?")


def parse_symbolize_table(text: str) -> dict[str, dict[int, float]]:
    """bench/symbolize.py's markdown table -> {method: {addresses: median seconds}}."""
    out: dict[str, dict[int, float]] = {}
    sizes: list[int] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "method":
            sizes = [int(c.split()[0].replace(",", "")) for c in cells[1:]]
            continue
        if not sizes or cells[0].startswith("---"):
            continue
        row: dict[int, float] = {}
        for n, cell in zip(sizes, cells[1:], strict=False):
            m = _CELL.match(cell)
            if m:
                row[n] = float(m.group(1).replace(",", ""))
        out[cells[0]] = row
    return out


def _sym_method(table: dict[str, dict[int, float]], prefix: str) -> dict[int, float]:
    return next((v for k, v in table.items() if k.startswith(prefix)), {})


# -- the report ---------------------------------------------------------------------


def _machine_line(m: dict[str, Any] | None, where: str) -> str:
    if not m:
        return f"- {where}: not run"
    accel = "QEMU TCG guest, 2 vCPUs" if m.get("guest") else "host"
    return (
        f"- {where}, {m.get('date', '?')}: Linux {m['kernel']} ({m['machine']}), {accel}, {m['cpu']} "
        f"x{m['cpus']}, load average {m['load']} when measured"
    )


def _other_guest_runs(
    first: dict[str, Any] | None, others: dict[str, dict[str, Any] | None]
) -> list[str]:
    """A line for each guest benchmark kept from an earlier run (`bench/run --only`):
    measured over an hour apart from `first` (one run's benchmarks are minutes apart)."""

    def at(m: dict[str, Any] | None) -> datetime.datetime | None:
        try:
            return datetime.datetime.strptime(str((m or {}).get("date")), "%Y-%m-%d %H:%M UTC")
        except ValueError:
            return None

    when = at(first)
    out = []
    for name, d in others.items():
        m = (d or {}).get("machine")
        then = at(m)
        if when and then and abs((when - then).total_seconds()) > 3600:
            out.append(
                f"- guest, {name}: kept from the run of {(m or {}).get('date')} (`bench/run --only`)"
            )
    return out


def render(
    results: Path,
    symbolize_md: Path = SYMBOLIZE_MD,
    bisect_md: Path = BISECT_MD,
    coverage_json: Path = COVERAGE_JSON,
) -> str:
    """bench/RESULTS.md from the JSON files in `results` and the symbolize table."""
    startup = load_json(results / "startup.json")
    pertest = load_json(results / "pertest.json")
    by_kernel = {
        p.stem.split("@", 1)[1]: d
        for p in sorted(results.glob("pertest@*.json"))
        if (d := load_json(p)) is not None
    } or ({"6.12": pertest} if pertest else {})
    graph = load_json(results / "graph_overhead.json")
    thr = load_json(results / "throughput.json")
    attach = load_json(results / "attach.json")
    guest_m = next((d["machine"] for d in (pertest, graph, thr, attach) if d), None)
    sym_file = results / "symbolize.md"
    if not sym_file.exists():
        sym_file = symbolize_md  # not run this time: the symbolizer's own last table
    sym_text = sym_file.read_text() if sym_file.exists() else ""
    sym = parse_symbolize_table(sym_text)

    summary: list[list[str]] = []

    def add(what: str, target: str, measured: str, v: str, key: str) -> None:
        summary.append([what, target, measured, v, LIMITS[key] if v == "missed" else ""])

    # 1. symbolization
    cold, warm = _sym_method(sym, "pytest-lbr cold"), _sym_method(sym, "pytest-lbr warm")
    llvm = _sym_method(sym, "llvm-symbolizer")
    for n in sorted(llvm):
        c = cold.get(n) / llvm[n] if n in cold and llvm[n] else None
        w = llvm[n] / warm[n] if n in warm and warm[n] else None
        add(
            f"symbolize {n:,} addrs, cold",
            f"<= {TARGET_COLD}x llvm-symbolizer",
            fmt_ratio(c),
            verdict(c, TARGET_COLD),
            "cold",
        )
        add(
            f"symbolize {n:,} addrs, warm",
            f">= {TARGET_WARM:.0f}x faster than llvm-symbolizer",
            "-" if w is None else f"{w:.1f}x faster",
            verdict(w, TARGET_WARM, at_most=False),
            "warm",
        )
    if not llvm:
        add("symbolization", "cold <= 1.5x, warm >= 20x", "-", "not measured", "cold")

    # 2. mass attach
    globs = (attach or {}).get("globs", {})
    small = globs.get("tcp_*")
    if small and "bpftrace" in small:
        r_k, r_p = small.get("ratio_vs_kfunc"), small.get("ratio_vs_kprobe")
        worst = max((r for r in (r_k, r_p) if r is not None), default=None)
        measured = f"{fmt_ratio(r_k, 3)} of kfunc:, {fmt_ratio(r_p, 3)} of kprobe:"
        if r_k is None or r_p is None:
            bt = small["bpftrace"]
            why = "; ".join(f"{k}: {e}" for k, e in bt.get("errors", {}).items())
            measured += (
                f" (pytest-lbr arm+disarm {fmt_stat(small['ours']['total'])} s; bpftrace "
                f"kprobe: net {fmt_stat(bt.get('kprobe_net'))} s, no-probe run "
                f"{fmt_stat(bt.get('baseline'))} s; {why or 'a net time of 0 has no ratio'})"
            )
        add(
            f"arm kfunc:tcp_* ({small['ours']['functions']} functions)",
            f"<= {TARGET_ATTACH}x bpftrace (kfunc: and kprobe:)",
            measured,
            verdict(worst, TARGET_ATTACH),
            "attach",
        )
    else:
        add("arm kfunc:tcp_*", f"<= {TARGET_ATTACH}x bpftrace", "-", "not measured", "attach")

    # 3. start-up
    if startup:
        cpu_r, wall_r = startup.get("cpu_ratio_lbr_vs_plain"), startup.get("ratio_lbr_vs_plain")
        add(
            f"pytest --lbr start-up, {startup['tests']} untraced tests",
            f"<= {TARGET_STARTUP}x plain pytest",
            f"{fmt_ratio(cpu_r)} CPU time ({fmt_ratio(wall_r)} wall)",
            verdict(cpu_r, TARGET_STARTUP),
            "startup",
        )
    else:
        add("pytest --lbr start-up", f"<= {TARGET_STARTUP}x", "-", "not measured", "startup")

    # 3b. per-test cost of the graph backend, each guest
    for label, d in sorted(by_kernel.items(), key=lambda kv: kv[0] != "6.12"):
        secs = d["seconds"].get("graph")
        if not secs:
            add(f"graph-traced test ({label})", "<= 0.5 s", "-", "not measured", "pertest")
            continue
        med, r = statistics.median(secs), ratio(secs, d["seconds"]["untraced"])
        ok = med <= TARGET_PERTEST_S and r is not None and r <= TARGET_PERTEST_X
        add(
            f"graph-traced BPF test after the first ({label})",
            f"<= {TARGET_PERTEST_S} s and <= {TARGET_PERTEST_X:.0f}x untraced",
            f"{med:.3f} s, {fmt_ratio(r)}",
            "met" if ok else "missed",
            "pertest",
        )
        # Issue 30: the program loaded per test (like the untraced test) and once (a
        # module- or session-scoped fixture: the session keeps its hook).
        for variant, limit in TARGETS_PERTEST_30.items():
            for name in (variant, f"{variant}, program loaded once"):
                v = d["seconds"].get(name)
                if not v:
                    continue
                r = ratio(v, d["seconds"]["untraced"])
                once = name != variant
                add(
                    f"{name}, BPF test after the first ({label})",
                    f"<= {limit:.0f}x untraced (issue 30)",
                    f"{statistics.median(v):.3f} s, {fmt_ratio(r)}"
                    + (" (the untraced test loads its program, this one does not)" if once else ""),
                    "not like for like" if once else verdict(r, limit),
                    "pertest30",
                )

        # Issue 54: the bounds a suite that loads a program per test needs.
        for name, limit in TARGETS_PERTEST_54.items():
            v = d["seconds"].get(name)
            if not v:
                continue
            r = ratio(v, d["seconds"]["untraced"])
            add(
                f"{name}, BPF test after the first ({label})",
                f"<= {limit:g}x untraced (issue 54)",
                f"{statistics.median(v):.3f} s, {fmt_ratio(r)}",
                verdict(r, limit),
                "pertest54",
            )
        first = d.get("first", {}).get("graph")
        if first is not None:
            add(
                f"first graph-traced BPF test ({label})",
                f"<= {TARGET_FIRST_S:g} s (issue 54)",
                f"{first:.2f} s",
                "met" if first <= TARGET_FIRST_S else "missed",
                "first54",
            )

    # 4. no silent loss
    if thr:
        ok, total = thr["accounted_runs"], thr["total_runs"]
        add(
            "trace.lost == true loss",
            "every run",
            f"{ok}/{total} runs",
            "met" if ok == total else "missed",
            "loss",
        )
    else:
        add("trace.lost == true loss", "every run", "-", "not measured", "loss")

    # 6. soak (issue 19)
    soak = load_json(results / "soak.json") or load_json(SOAK_JSON)
    for b in (soak or {}).get("backends", []):
        grew = {k: v for k, v in b["growth"].items() if k != "rss_kib" and v > 0}
        rss = b["growth"]["rss_kib"] / 1024
        add(
            f"soak, {b['backend']} backend, {b['cycles']:,} cycles",
            "no kernel object or fd grows; RSS < 5 MB after warm-up",
            f"{', '.join(f'{k} +{v}' for k, v in grew.items()) or 'nothing grew'}; "
            f"RSS {rss:+.2f} MiB",
            "missed" if b["problems"] else "met",  # growth, RSS, left behind, wrong hits
            "soak",
        )
    if not soak:
        add("soak", "no growth", "-", "not measured", "soak")

    # 8. coverage
    coverage = load_json(coverage_json)
    for kernel, run in sorted((coverage or {}).get("kernels", {}).items()):
        # Judged on what coverage's own work added to its run (timed in-process): two
        # runs of the suite differ by more than 10% from the shared machine's load alone.
        r = run.get("added")
        add(
            f"--lbr-cov on the traced examples ({kernel})",
            f"<= {TARGET_COVERAGE:.2f}x the traced suite",
            f"{fmt_ratio(r, 3)} (its own work; run against run {fmt_ratio(run.get('ratio'), 3)})",
            verdict(r, TARGET_COVERAGE),
            "coverage",
        )
    for kernel, run in sorted((coverage or {}).get("exact", {}).items()):
        # Judged run against run: the counters' cost is in the programs' own runs,
        # which no in-process timer sees.
        r = run.get("ratio")
        add(
            f"--lbr-cov-exact on the traced examples ({kernel})",
            f"<= {TARGET_EXACT:.2f}x the traced suite",
            f"{fmt_ratio(r, 3)} (run against run; its own work {fmt_ratio(run.get('added'), 3)})",
            verdict(r, TARGET_EXACT),
            "coverage",
        )

    out = [
        "# pytest-lbr benchmarks",
        "",
        "Written by `bench/run` (see bench/README.md). Each figure: median of the runs "
        "(min-max); ratios are between medians measured in the same run.",
        "",
        _machine_line(startup.get("machine") if startup else None, "host"),
        _machine_line(guest_m, "guest"),
        *_other_guest_runs(guest_m, {"attach": attach, "throughput": thr, "graph": graph}),
        "",
        "**The guests run under QEMU TCG** (this host's KVM cannot boot stock kernels): "
        "code runs 5-20x slower than native and other VMs share the 2 cores, so absolute "
        "guest times mean little; **only the ratios mean anything**.",
        "",
        "## Targets",
        "",
        markdown_table(["what", "target", "measured", "verdict", "what limits it"], summary),
        "",
    ]
    out += _symbolize_section(sym_text, sym_file)
    out += _attach_section(attach)
    out += _pertest_section(by_kernel, startup)
    out += _throughput_section(thr)
    out += _graph_section(graph)
    out += _soak_section(results / "soak.md" if (results / "soak.md").exists() else SOAK_MD)
    out += _coverage_section(coverage)
    out += _bisect_section(bisect_md)
    return "\n".join(out).rstrip() + "\n"


def _cost_cells(kernel: str, run: dict[str, Any]) -> list[Any]:
    """A coverage_cost.py run's cells: kernel, when, both runs' seconds, their ratio,
    coverage's own work and what it added."""
    return [
        kernel,
        run["machine"]["date"],
        fmt_stat(run["seconds"]["traced"], 1),
        fmt_stat(run["seconds"]["coverage"], 1),
        fmt_ratio(run["ratio"], 3),
        fmt_stat(run["seconds"].get("spent"), 2),
        fmt_ratio(run.get("added"), 3),
    ]


def _coverage_section(data: dict[str, Any] | None) -> list[str]:
    out = ["## 7. Coverage cost (6.1 and 6.12 guests)", ""]
    if not data:
        return [*out, "Not run.", ""]
    rows = [
        [*_cost_cells(kernel, run), run["programs_in_table"]]
        for kernel, run in sorted(data["kernels"].items())
    ]
    return [
        *out,
        "From bench/coverage_cost.py (its own run in each guest, not part of bench/run): "
        "the whole examples suite, `pytest examples -q --lbr` and the same with `--lbr-cov`, "
        "each a fresh pytest process in one guest boot, after an unmeasured warm-up; the "
        "coverage run first, so what warm-up is left favours the run without it. Seconds, wall "
        "clock; one run of each. Two runs differ by more than 10% from the shared machine's "
        "load alone, so the coverage run also times coverage's own work in-process (the "
        "collector's calls, the end of the session): *added* is that run over itself less "
        "that work, and is what the target judges.",
        "",
        markdown_table(
            [
                "kernel",
                "when",
                "--lbr",
                "--lbr --lbr-cov",
                "run against run",
                "coverage's own work",
                "added",
                "programs in the table",
            ],
            rows,
        ),
        "",
        *([data["note"], ""] if data.get("note") else []),
        *_exact_rows(data.get("exact", {})),
    ]


def _exact_rows(exact: dict[str, Any]) -> list[str]:
    """`bench/coverage_cost.py --mode exact`: the same suite with `--lbr-cov-exact`."""
    if not exact:
        return []
    rows = [_cost_cells(kernel, run) for kernel, run in sorted(exact.items())]
    return [
        "Exact mode (`bench/coverage_cost.py --mode exact --alternate --runs 4`, its own run "
        "in each guest, both side by side): the same suite with `--lbr --lbr-cov-exact` "
        "against `--lbr`, in turns that alternate which runs first (a boot's runs get faster "
        "one after the other: coverage first in every turn read 1.24x-1.37x). Its own work is the "
        "counted programs' second load (a second verification each) and the reads after "
        "each test; the counters' cost inside the programs' runs shows only run against "
        "run, which judges the target.",
        "",
        markdown_table(
            [
                "kernel",
                "when",
                "--lbr",
                "--lbr --lbr-cov-exact",
                "run against run",
                "exact mode's own work",
                "added",
            ],
            rows,
        ),
        "",
    ]


def _bisect_section(source: Path) -> list[str]:
    out = ["## 8. Kernel bisection (issue 16)", ""]
    if not source.exists():
        return [*out, "Not run.", ""]
    lines = source.read_text().splitlines()
    title = next((ln[2:] for ln in lines if ln.startswith("# ")), source.name)
    body = [ln for ln in lines if not ln.startswith("# ")]
    while body and not body[0].strip():
        body.pop(0)
    return [*out, f"From bench/{source.name} ({title}; not part of bench/run):", "", *body, ""]


def _soak_section(source: Path) -> list[str]:
    out = ["## 6. Soak (6.12 guest)", ""]
    if not source.exists():
        return [*out, "Not run.", ""]
    body = [ln for ln in source.read_text().splitlines() if not ln.startswith("# ")]
    while body and not body[0].strip():
        body.pop(0)
    title = next((ln[2:] for ln in source.read_text().splitlines() if ln.startswith("# ")), "")
    return [
        *out,
        f"From bench/soak.py ({title or source.name}; its own run, not part of bench/run). "
        "Counts at the start, after the warm-up (the baseline), every 200 cycles, at the end "
        "and after the backend is closed:",
        "",
        *body,
        "",
    ]


def _symbolize_section(text: str, source: Path) -> list[str]:
    out = ["## 1. Symbolization (host, Debian 6.1 debug vmlinux)", ""]
    if not text:
        return [*out, "Not run.", ""]
    body = [ln for ln in text.splitlines() if not ln.startswith("# ")]
    where = (
        "this run, without the pyelftools-only row (see bench/RESULTS-symbolize.md)"
        if source.name == "symbolize.md"
        else f"not run this time: {source.name}"
    )
    return [*out, f"From bench/symbolize.py ({where}):", "", *body, ""]


def _attach_section(attach: dict[str, Any] | None) -> list[str]:
    out = ["## 2. Mass attach (6.12 guest), seconds", ""]
    if not attach:
        return [*out, "Not run.", ""]
    rows = []
    for glob, e in attach["globs"].items():
        o = e["ours"]
        bt = e.get("bpftrace") or {}
        probes = bt.get("probes", {})
        rows.append(
            [
                f"`{glob}`",
                f"{o['functions']} ({o['how']})",
                fmt_stat(o["arm"]),
                fmt_stat(o["total"]),
                f"{fmt_stat(bt.get('kfunc_net'))} [{probes.get('kfunc')}]",
                f"{fmt_stat(bt.get('kprobe_net'))} [{probes.get('kprobe')}]",
                fmt_stat(bt.get("baseline")),
                fmt_ratio(e.get("ratio_vs_kfunc"), 3),
                fmt_ratio(e.get("ratio_vs_kprobe"), 3),
            ]
        )
    out.append(
        markdown_table(
            [
                "glob",
                "functions (how)",
                "pytest-lbr arm",
                "pytest-lbr arm+disarm",
                "bpftrace kfunc: net [probes]",
                "bpftrace kprobe: net [probes]",
                "bpftrace, no probe",
                "ours / kfunc:",
                "ours / kprobe:",
            ],
            rows,
        )
    )
    errors = {g: e["bpftrace"]["errors"] for g, e in attach["globs"].items() if e.get("bpftrace")}
    out += [
        "",
        "pytest-lbr: `LbrCapture.start()` on `kfunc:GLOB` (glob expansion from "
        "available_filter_functions, tracer load, one kprobe.multi link, per-CPU perf "
        "events; software events since TCG has no PMU), then `close()`. bpftrace: "
        "`bpftrace -e 'kfunc:GLOB {}' -c /bin/true` (attach, run it, detach) minus "
        "`bpftrace -e 'BEGIN {}' -c /bin/true` (its own start-up); the ratio uses arm+disarm.",
        "The ~2,000-function set is `acpi_*,pci_*` (two globs: two kprobe.multi links for "
        "pytest-lbr, two probes for bpftrace; subsystems idle in the guest), the count above "
        "is what this kernel lists as traceable. A session reads available_filter_functions "
        "once (again only when /proc/modules changes): the first arm+disarm of a run, which "
        "pays that read, took "
        + "; ".join(
            f"{e['ours'].get('first_total', 0):.3f} s for `{g}`" for g, e in attach["globs"].items()
        )
        + " (the medians above are the later arms). Glob expansion alone, with that read "
        "(one regex over the file), took "
        + "; ".join(
            f"{fmt_stat(e['ours'].get('expand'))} s for `{g}`" for g, e in attach["globs"].items()
        )
        + " and opening the per-CPU perf events "
        + "; ".join(f"{fmt_stat(e['ours'].get('perf_events'))} s" for e in attach["globs"].values())
        + ".",
    ]
    for glob, e in attach["globs"].items():
        dropped = (e.get("bpftrace") or {}).get("kfunc_dropped")
        if dropped:
            out.append(
                f"bpftrace 0.17 aborts the whole `kfunc:{glob}` wildcard because it cannot load "
                f"{', '.join(f'`{d}`' for d in dropped)}; its kfunc: runs list the same "
                "functions one by one without those."
            )
    for glob, errs in errors.items():
        for kind, err in errs.items():
            out.append(f"bpftrace {kind}:{glob} failed: `{err}`")
    return [*out, ""]


def _pertest_section(
    by_kernel: dict[str, dict[str, Any]], startup: dict[str, Any] | None
) -> list[str]:
    out = ["## 3. Per-test cost", ""]
    if by_kernel:
        out += [
            "Guest: load xdp_helpers.bpf.o, run it once, close; traced = the run inside a "
            "trace of that program (arm, run, disarm, collect, symbolize). Seconds per test "
            "after the first (median of the runs); 'first' is the first such test, with "
            "imports, probing and the graph backend's set-up. Ratios against 'untraced', "
            "measured before anything traced. 'graph' keeps the function tracer on for the "
            "session (what the plugin does); 'graph, set up per test' turns it on and off "
            "around each test; 'untraced, graph on' is an untraced test while it is on; "
            "'program loaded once': the program of a module- or session-scoped fixture, "
            "whose hook the session keeps (its ratio is against the untraced test, which "
            "loads its program: not like for like).",
            "",
        ]
    for label, pertest in sorted(by_kernel.items(), key=lambda kv: kv[0] != "6.12"):
        rows = []
        for name, secs in pertest["seconds"].items():
            r = ratio(secs, pertest["seconds"]["untraced"])
            err = pertest["errors"].get(name, "")
            first = pertest["first"].get(name)
            rows.append(
                [name, fmt_stat(secs), fmt_ratio(r), "-" if first is None else f"{first:.3f}", err]
            )
        out += [
            f"Guest {label} (Linux {pertest.get('kernel', '?')}):",
            "",
            markdown_table(
                ["test", "seconds per test", "vs untraced", "first test", "error"], rows
            ),
            "",
        ]
    if startup:
        rows = [
            [
                name,
                fmt_stat(startup["seconds"][name]),
                fmt_stat(startup["cpu_seconds"][name]),
                fmt_ratio(ratio(startup["cpu_seconds"][name], startup["cpu_seconds"]["plain"])),
            ]
            for name in startup["seconds"]
        ]
        out += [
            f"Host: whole `pytest -q` process on a suite of {startup['tests']} untraced tests. "
            "plain = `-p no:lbr`; installed = plugin loaded, no --lbr. CPU time = user+system "
            "of the pytest process (steadier than wall time on this shared machine).",
            "",
            markdown_table(["pytest", "wall seconds", "CPU seconds", "CPU vs plain"], rows),
            "",
        ]
    return out


def _throughput_section(thr: dict[str, Any] | None) -> list[str]:
    out = ["## 4. Ring buffer throughput and loss accounting (6.12 guest)", ""]
    if not thr:
        return [*out, "Not run.", ""]

    def row(label: str, s: dict[str, Any]) -> list[str]:
        return [
            label,
            f"{s['offered_rate']:,.0f}/s" if s["offered_rate"] else "flat out",
            f"{s['truth']:,}",
            f"{s['delivered']:,}",
            f"{s['attempted_per_s']:,.0f}",
            f"{s['delivered_per_s']:,.0f}",
            f"{s['lost']:,}",
            f"{s['true_loss']:,}",
            "yes" if s["accounted"] else "**NO**",
        ]

    rows = [row("burst (read at the end)", s) for s in thr["burst"]]
    rows += [row("stream, flat out", s) for s in thr["flat_out"]]
    rows += [row("stream, search", s) for s in thr.get("search", [])]
    rows += [row("stream, at loss-free rate", s) for s in thr.get("at_rate", [])]
    rows += [row("stream, 10x that rate", s) for s in thr.get("ten_x", [])]
    best = thr.get("loss_free_rate")
    achieved = [s["attempted_per_s"] for s in thr.get("at_rate", [])]
    ten = [s["attempted_per_s"] for s in thr.get("ten_x", [])]
    ten_lost = [s["lost"] for s in thr.get("ten_x", [])]
    out += [
        f"- Loss-free streaming: **{fmt_stat(achieved, 0)} hits/s** achieved (the paced "
        f"driver was asked for {'-' if best is None else f'{best:,.0f}'}/s; under TCG it "
        f"reaches less), every hit delivered; fastest the guest drives the traced program: "
        f"{thr['max_attempted_per_s']:,.0f} hits/s.",
        "- At ~10x that (driven flat out"
        + ("" if thr.get("ten_x_reachable", True) else ", the most the guest can do")
        + f"): {fmt_stat(ten, 0)} hits/s attempted, lost {fmt_stat(ten_lost, 0)} per run, "
        "each counted.",
        f"- Burst capacity (what `Tracer.trace` holds, reading only at the end): "
        f"{thr['burst_capacity']:,} hits without loss.",
        f"- `lost` equals the true loss (program's own packet counter minus hits "
        f"delivered) in **{thr['accounted_runs']}/{thr['total_runs']}** runs.",
        "",
        markdown_table(
            [
                "run",
                "offered",
                "executions (truth)",
                "delivered",
                "attempted/s",
                "delivered/s",
                "lost (tracer)",
                "true loss",
                "lost == truth",
            ],
            rows,
        ),
        "",
    ]
    return out


def _graph_section(graph: dict[str, Any] | None) -> list[str]:
    out = ["## 5. Graph backend overhead (6.12 guest)", ""]
    if not graph:
        return [*out, "Not run.", ""]
    s, r = graph["seconds"], graph["ratios"]
    rows = [
        ["untraced (in process)", fmt_stat(s["untraced"]), "1.00x", "-", "-"],
        [
            "untraced (child python)",
            fmt_stat(s["untraced_child"]),
            fmt_ratio(ratio(s["untraced_child"], s["untraced"])),
            fmt_stat(s["untraced_child_total"]),
            "-",
        ],
        [
            "pytest-lbr graph, kfunc:vfs_write",
            fmt_stat(s["graph_body"]),
            fmt_ratio(r["graph_body_vs_untraced"]),
            fmt_stat(s["graph_total"]),
            fmt_ratio(r["graph_total_vs_untraced"]),
        ],
        [
            "trace-cmd record -p function_graph -F + report",
            fmt_stat(s["tracecmd_body"]),
            fmt_ratio(r["tracecmd_body_vs_untraced"]),
            fmt_stat(s["tracecmd_net"]),
            fmt_ratio(r["tracecmd_net_vs_untraced"]),
        ],
    ]
    hits = ", ".join(str(h) for h in graph["hits"])
    lost = ", ".join(str(x) for x in graph["lost"])
    out += [
        f"Body: {graph['writes']:,} write(2)s of one byte to /dev/null. 'body' = time "
        "inside the traced block; 'total' = arm + body + collect (pytest-lbr: parse and "
        "build hits; trace-cmd: record + report, minus the untraced child's whole run).",
        "",
        markdown_table(
            ["variant", "body s", "body vs untraced", "total s", "total vs untraced"], rows
        ),
        "",
        f"pytest-lbr graph total vs trace-cmd total: {fmt_ratio(r['graph_total_vs_tracecmd_net'])}; "
        f"body vs trace-cmd body: {fmt_ratio(r['graph_body_vs_tracecmd_body'])}. "
        f"Hits per run (want {graph['writes']}): {hits}; trace.lost: {lost}.",
        "",
    ]
    return out


# -- command line -------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of bench/run."""
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument(
        "--results", type=Path, help="JSON results dir (default /tmp/plbr-bench-<time>)"
    )
    ap.add_argument(
        "--kernel", default="6.12", help="guest kernel for pytest-lbr vm (default 6.12)"
    )
    ap.add_argument(
        "--pertest-kernel",
        action="append",
        default=None,
        help="also measure the per-test cost in this guest kernel (repeatable; default 6.1)",
    )
    ap.add_argument("--skip-host", action="store_true", help="no host benchmarks")
    ap.add_argument("--skip-symbolize", action="store_true", help="no symbolization benchmark")
    ap.add_argument("--skip-guest", action="store_true", help="no guest benchmarks")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument(
        "--only",
        metavar="NAMES",
        help="guest benchmarks to (re)run, comma-separated: throughput,attach,pertest,"
        "graph_overhead (the others' JSON in --results is kept)",
    )
    ap.add_argument("--report-only", action="store_true", help="re-render from --results")
    ap.add_argument("--output", type=Path, default=RESULTS_MD, help="markdown file to write")
    args = ap.parse_args(argv)
    if args.pertest_kernel is None:
        args.pertest_kernel = ["6.1"]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected parts, then write the markdown report."""
    args = parse_args(argv)
    results = (args.results or Path(f"/tmp/plbr-bench-{time.strftime('%Y%m%d-%H%M%S')}")).resolve()
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not args.report_only:
        (results / "bench-run.json").write_text(json.dumps(machine_info()))
        if not args.skip_host:
            run_host(args, results)
        if not args.skip_guest:
            if shutil.which("vng") is None and not (Path(PY).parent / "vng").exists():
                _log("no virtme-ng (vng): guest benchmarks skipped")
            else:
                run_guest(args, results)
    report = render(results)
    args.output.write_text(report)
    print(report)
    _log(f"results in {results}; report {args.output}; {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
