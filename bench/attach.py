"""Benchmark (guest, 6.12): time to arm a capture on many kernel functions vs bpftrace.

For each glob, per run:

* pytest-lbr: `LbrCapture.start()` (glob expansion, tracer load, one
  kprobe.multi link, per-CPU perf events) and then `close()`; "arm" is start
  alone, "arm+disarm" both;
* bpftrace `kfunc:GLOB {}` and `kprobe:GLOB {}` with `-c true` (attach
  everything, run `true`, detach, exit) minus the same bpftrace process with
  no probe (`BEGIN {}`, `-c true`), so bpftrace's own start-up (~3 s under TCG)
  is not counted against it.

The guest has no PMU, so the per-CPU branch events are software events with
the same attributes (as the kernel tests do); everything else is the real
path. Must run as root in a guest that allows kprobes (pytest-lbr vm).

    python bench/attach.py [--runs 3] [--glob 'tcp_*' --glob '...'] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_common_args, ratio, save_json, stat  # noqa: E402

__all__ = [
    "BIG_GLOB",
    "SMALL_GLOB",
    "bpftrace_run",
    "main",
    "ours",
    "parse_args",
]

#: ~380 functions on 6.12: the case users hit first.
SMALL_GLOB = "tcp_*"
#: ~2,000 traceable functions on Debian's 6.12 (1,419 + 687; the count is reported):
#: a prefix set of subsystems that are idle in a test guest, so arming is all
#: that is measured. A comma separates globs (one target / one bpftrace probe each).
BIG_GLOB = "acpi_*,pci_*"


def ours(glob: str, runs: int) -> dict[str, Any]:
    """Arm and disarm times of an LBR capture on `kfunc:<glob>` (seconds per run).

    One unmeasured warm-up first (module imports, page cache), as a test
    session pays it once. Also times the parts of arming that are not the
    kernel's: glob expansion and the per-CPU perf events.
    """
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.capture.lbr.backend import LbrCapture
    from pytest_lbr.kernel import functions as kernel_functions
    from pytest_lbr.kernel.functions import expand_glob
    from pytest_lbr.kernel.perf import software_branch_events
    from pytest_lbr.targets import parse_target

    globs = glob.split(",")
    arm: list[float] = []
    disarm: list[float] = []
    expand: list[float] = []
    events: list[float] = []
    functions = 0
    how = ""
    first = 0.0
    for i in range(runs + 1):
        cap = LbrCapture(
            [parse_target(f"kfunc:{g}") for g in globs],
            check=False,
            open_events=software_branch_events,
        )
        t0 = time.perf_counter()
        try:
            cap.start()
            t1 = time.perf_counter()
            hooks = cap._hooks
            if isinstance(hooks, HookSet) and hooks.attached:
                functions = sum(len(a.functions) for a in hooks.attached)
                how = ", ".join(sorted({a.how for a in hooks.attached}))
        finally:
            t2 = time.perf_counter()
            cap.close()
            t3 = time.perf_counter()
        if i == 0:
            first = t3 - t0  # includes the session's one read of available_filter_functions
            continue
        arm.append(t1 - t0)
        disarm.append(t3 - t2)
        kernel_functions._FILTER_FUNCTIONS.clear()  # time the read too: what a session's first arm pays
        t0 = time.perf_counter()
        for g in globs:
            expand_glob(g)
        t1 = time.perf_counter()
        software_branch_events("any").close()
        t2 = time.perf_counter()
        expand.append(t1 - t0)
        events.append(t2 - t1)
    total = [a + d for a, d in zip(arm, disarm, strict=True)]
    return {
        "functions": functions,
        "how": how,
        "arm": arm,
        "disarm": disarm,
        "total": total,
        "expand": expand,
        "first_total": first,
        "perf_events": events,
    }


def _raise_nofile() -> None:
    # bpftrace keeps fds per kfunc program: 388 of them pass the guest's 1,024 limit
    # ("FATAL: dup(fd): Too many open files: please raise NOFILE").
    resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))


def bpftrace_run(program: str, max_probes: int = 8192) -> tuple[float, int | None, str]:
    """(seconds, probes bpftrace attached, error tail) for `bpftrace -e PROGRAM -c true`."""
    env = dict(os.environ, BPFTRACE_MAX_PROBES=str(max_probes))
    t0 = time.perf_counter()
    out = subprocess.run(
        ["bpftrace", "-e", program, "-c", "/bin/true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        preexec_fn=_raise_nofile,
    )
    elapsed = time.perf_counter() - t0
    m = re.search(r"Attaching (\d+) probes?", out.stdout + out.stderr)
    err = "" if out.returncode == 0 else (out.stderr.strip().splitlines() or ["?"])[-1]
    return elapsed, int(m.group(1)) if m else None, err


_LOAD_ERROR = re.compile(r"Error loading program: kfunc:(?:vmlinux:)?(\w+)")


def bpftrace_kfunc_program(glob: str, tries: int = 6) -> tuple[str, list[str]]:
    """A bpftrace program for kfunc:GLOB that bpftrace can load, and the functions left out.

    bpftrace 0.17 aborts a whole kfunc: wildcard when one function's program
    fails to load (on 6.12, e.g. tcp_v6_init_seq_and_ts_off), before attaching
    anything, so timing the glob as such would time a failure. Then the same
    functions are listed one by one, minus those bpftrace cannot load.
    """
    from pytest_lbr.kernel.functions import expand_glob

    program = ",".join(f"kfunc:{g}" for g in glob.split(",")) + " {}"
    _, _, err = bpftrace_run(program)
    if not err:
        return program, []
    names = [n for g in glob.split(",") for n in expand_glob(g)]
    dropped: list[str] = []
    for _ in range(tries):
        m = _LOAD_ERROR.search(err)
        if not m or m.group(1) not in names:
            raise RuntimeError(f"bpftrace kfunc:{glob}: {err}")
        names.remove(m.group(1))
        dropped.append(m.group(1))
        program = ",".join(f"kfunc:{n}" for n in names) + " {}"
        _, _, err = bpftrace_run(program)
        if not err:
            return program, dropped
    raise RuntimeError(f"bpftrace kfunc:{glob}: still failing after dropping {dropped}: {err}")


def bpftrace_glob(glob: str, runs: int) -> dict[str, Any]:
    """bpftrace kfunc:/kprobe: on `glob`, and its no-probe baseline, `runs` each, interleaved."""
    res: dict[str, Any] = {"baseline": [], "kfunc": [], "kprobe": [], "probes": {}, "errors": {}}
    bpftrace_run("BEGIN {}")  # warm-up: the first run reads bpftrace and BTF from a cold cache
    programs = {"kprobe": ",".join(f"kprobe:{g}" for g in glob.split(",")) + " {}"}
    try:
        programs["kfunc"], res["kfunc_dropped"] = bpftrace_kfunc_program(glob)
    except RuntimeError as exc:
        res["errors"]["kfunc"] = str(exc)
    for _ in range(runs):
        res["baseline"].append(bpftrace_run("BEGIN {}")[0])
        for kind, program in programs.items():
            secs, probes, err = bpftrace_run(program)
            res[kind].append(secs)
            res["probes"][kind] = probes
            if err:
                res["errors"][kind] = err
    base = stat(res["baseline"]).median
    for kind in ("kfunc", "kprobe"):
        # Attach + detach time: the whole run minus bpftrace's own start-up.
        res[f"{kind}_net"] = [max(t - base, 0.0) for t in res[kind]]
    return res


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=3)
    ap.add_argument(
        "--glob",
        action="append",
        help=f"kernel function glob (repeatable; default {SMALL_GLOB!r} and {BIG_GLOB!r})",
    )
    ap.add_argument(
        "--bpftrace-runs", type=int, help="runs of each bpftrace variant (default: --runs)"
    )
    ap.add_argument(
        "--big-runs",
        type=int,
        help="runs of bpftrace on globs of over 1,000 functions (default: --bpftrace-runs)",
    )
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    args = parse_args(argv)
    globs = args.glob or [SMALL_GLOB, BIG_GLOB]
    have_bpftrace = shutil.which("bpftrace") is not None
    results: dict[str, Any] = {}
    for glob in globs:
        print(f"# attach {glob}", file=sys.stderr, flush=True)
        entry: dict[str, Any] = {"ours": ours(glob, args.runs)}
        if have_bpftrace:
            runs = args.bpftrace_runs or args.runs
            if entry["ours"]["functions"] > 1000 and args.big_runs:
                runs = args.big_runs
            bt = bpftrace_glob(glob, runs)
            entry["bpftrace"] = bt
            for kind in ("kfunc", "kprobe"):
                entry[f"ratio_vs_{kind}"] = ratio(entry["ours"]["total"], bt[f"{kind}_net"])
        results[glob] = entry
        # After each glob: bpftrace on ~2,000 kfuncs takes many minutes under TCG.
        save_json(
            args.out,
            {"benchmark": "attach", "globs": results, "bpftrace": have_bpftrace},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
