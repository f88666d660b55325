"""Benchmark (guest): a long session arms and disarms traces, and nothing piles up.

One session per backend, kept as the pytest plugin keeps it: one `Backend`
resolved once, and a new `Tracer` on it for every cycle (the plugin's traced
test). A cycle arms one kind of target, does what that target traces, disarms,
and checks it got exactly its hits with nothing lost. The kinds take turns, a
suite's mix of one-target tests rather than every kind in every trace:

* prog   -- tests/bpf/build/xdp_helpers.bpf.o's `xdp_helpers` (loaded once, before
            the session), run once with BPF_PROG_TEST_RUN;
* kfunc  -- `kfunc:vfs_write`, one write(2) to /dev/null;
* glob   -- `kfunc:vfs_wri*`, the same write;
* tp     -- `tp:syscalls/sys_enter_getppid`, one getppid(2);
* uprobe -- `uprobe:BIN:lbr_add`, BIN being tests/c/uprobe_target.c built with gcc,
            run once as a child process;
* all    -- the five in one trace, each done once.

Measured (`tests/kernel/kernel_state.usage`: this process's fds and perf event
fds, the kernel's BPF programs, links and maps, tracefs instances, kprobe and
uprobe events, and VmRSS after gc and malloc_trim, less the BPF maps it has
mapped: a kept hook's ring buffer, fixed in size) at the start, after a warm-up
of `WARMUP_TURNS` turns
(imports, caches, the graph backend's function tracer, set up once per
session: the baseline), every `--every` cycles, at the end, and once more after
the backend is closed. `SoakResult.problems` says what failed: any count above
the baseline at the end, RSS up by `RSS_LIMIT_KIB` or more, a kernel object
still there after the backend is closed, a cycle with the wrong hits.

The LBR path runs on software perf events (no PMU in a TCG guest, as in
tests/kernel/test_lbr_backend.py): everything but the branch records is real.
A kind a backend does not support is skipped, and the result says which.
tests/kernel/test_soak.py runs this code at CI size.

    python bench/soak.py [--cycles 2000] [--every 200] [--backend graph] [--out FILE] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, fmt_stat, markdown_table, save_json  # noqa: E402
from pertest import PACKET, XDP_OBJECT, XDP_PASS  # noqa: E402

from tests.kernel.kernel_state import OBJECT_FIELDS, Usage, session_backend, usage  # noqa: E402

__all__ = [
    "BACKENDS",
    "CI_KINDS",
    "KINDS",
    "RSS_LIMIT_KIB",
    "WARMUP_TURNS",
    "SoakResult",
    "main",
    "parse_args",
    "report",
    "soak",
    "workload",
]

BACKENDS = ("graph", "lbr")
KINDS = ("prog", "kfunc", "glob", "tp", "uprobe", "all")
#: tests/kernel/test_soak.py's lean mix: one target per trace.
CI_KINDS = KINDS[:-1]
#: Turns of every kind before the baseline.
WARMUP_TURNS = 2
#: "RSS grows by less than 5 MB after warm-up" (issue 19).
RSS_LIMIT_KIB = 5_000_000 // 1024
UPROBE_SOURCE = REPO / "tests" / "c" / "uprobe_target.c"
#: Kernel objects a closed backend must have given back (fds may stay: caches).
KERNEL_FIELDS = tuple(f for f in OBJECT_FIELDS if f != "fds")


@dataclass(frozen=True)
class Kind:
    """One kind of cycle: what it traces, what it does, how many hits that makes."""

    name: str
    targets: tuple[Any, ...]
    action: Callable[[], None]
    hits: int


@dataclass
class SoakResult:
    """One backend's soak: the measurements, in order, and what went wrong."""

    backend: str
    cycles: int
    #: (when, usage): "start", "warm", cycle numbers, "end", "closed".
    rows: list[tuple[str, Usage]] = field(default_factory=list)
    #: Seconds of each measured cycle, by kind.
    seconds: dict[str, list[float]] = field(default_factory=dict)
    #: Kinds this backend refused, and its reason.
    skipped: dict[str, str] = field(default_factory=dict)
    #: Cycles with other hits than their action makes (the first few, and how many).
    bad: list[str] = field(default_factory=list)
    bad_cycles: int = 0

    def at(self, when: str) -> Usage:
        """The usage measured at `when`."""
        return dict(self.rows)[when]

    def growth(self) -> dict[str, int]:
        """End minus the warm baseline, per `Usage` field."""
        end, warm = self.at("end").as_dict(), self.at("warm").as_dict()
        return {k: end[k] - warm[k] for k in end}

    def left_behind(self) -> dict[str, int]:
        """Kernel objects after the backend closed minus those at the start."""
        closed, start = self.at("closed").as_dict(), self.at("start").as_dict()
        return {k: closed[k] - start[k] for k in KERNEL_FIELDS}

    def problems(self) -> list[str]:
        """What fails the soak, one line each (empty: it passed)."""
        out = [f"{k} grew by {v}" for k, v in self.growth().items() if k != "rss_kib" and v > 0]
        rss = self.growth()["rss_kib"]
        if rss >= RSS_LIMIT_KIB:
            out.append(f"RSS grew by {rss} KiB (limit {RSS_LIMIT_KIB})")
        out += [f"{k}: {v:+} after the backend closed" for k, v in self.left_behind().items() if v]
        if self.bad_cycles:
            out.append(f"{self.bad_cycles} cycles with wrong hits, e.g. {'; '.join(self.bad)}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the JSON file."""
        return {
            "backend": self.backend,
            "cycles": self.cycles,
            "rows": [{"at": when, **u.as_dict()} for when, u in self.rows],
            "seconds": self.seconds,
            "skipped": self.skipped,
            "bad": self.bad,
            "bad_cycles": self.bad_cycles,
            "growth": self.growth(),
            "left_behind": self.left_behind(),
            "problems": self.problems(),
        }


def _uprobe_library(workdir: Path) -> Path | None:
    """tests/c/uprobe_target.c built into a shared library in `workdir`; None without gcc."""
    if shutil.which("gcc") is None:
        return None
    out = workdir / "libuprobe_target.so"
    cmd = ["gcc", "-O1", "-g", "-shared", "-fPIC", "-o", str(out), str(UPROBE_SOURCE)]
    subprocess.run(cmd, check=True)
    return out


@contextmanager
def workload() -> Iterator[tuple[list[Kind], dict[str, str]]]:
    """The kinds of cycle, with what they need set up once (the program loaded, the
    uprobe library built and loaded, /dev/null open), and the kinds left out and why."""
    from pytest_lbr.bpf import BpfLoader

    with BpfLoader() as bpf, tempfile.TemporaryDirectory() as tmp:
        prog = bpf.load(XDP_OBJECT).programs["xdp_helpers"]
        library = _uprobe_library(Path(tmp))
        null = os.open("/dev/null", os.O_WRONLY)

        def run_prog() -> None:
            if (r := prog.run(data=PACKET).retval) != XDP_PASS:
                raise RuntimeError(f"xdp_helpers returned {r}, want XDP_PASS")

        def write() -> None:
            os.write(null, b"x")

        lbr_add = ctypes.CDLL(str(library)).lbr_add if library else None

        def call_library() -> None:
            assert lbr_add is not None
            if (r := lbr_add(20, 22)) != 42:
                raise RuntimeError(f"lbr_add(20, 22) returned {r}")

        def everything() -> None:
            run_prog()
            write()
            os.getppid()
            call_library()

        kinds = [
            Kind("prog", (prog,), run_prog, 1),
            Kind("kfunc", ("kfunc:vfs_write",), write, 1),
            Kind("glob", ("kfunc:vfs_wri*",), write, 1),
            Kind("tp", ("tp:syscalls/sys_enter_getppid",), os.getppid, 1),
        ]
        skipped = {}
        if library is None:
            skipped["uprobe"] = skipped["all"] = "gcc is not installed (the uprobe target is built)"
        else:
            uprobe = f"uprobe:{library}:lbr_add"
            kinds.append(Kind("uprobe", (uprobe,), call_library, 1))
            targets = tuple(t for k in kinds for t in k.targets)
            kinds.append(Kind("all", targets, everything, len(targets)))
        try:
            yield kinds, skipped
        finally:
            os.close(null)


def _measure() -> Usage:
    # Cycles of garbage a finalizer will close are not a leak; collect them first.
    gc.collect()
    return usage()


def soak(
    backend: str,
    cycles: int,
    every: int = 200,
    kinds: Sequence[str] = KINDS,
    progress: Callable[[str], None] | None = None,
    warmup: int = WARMUP_TURNS,
) -> SoakResult:
    """`cycles` cycles of `kinds` in turn (after `warmup` turns of every kind more) on
    one session of `backend`, measured."""
    from pytest_lbr.capture import CaptureError
    from pytest_lbr.tracer import Tracer

    if cycles < 1:
        raise ValueError(f"cycles must be at least 1, not {cycles}")
    result = SoakResult(backend, cycles)
    with workload() as (available, skipped):
        result.skipped.update((k, why) for k, why in skipped.items() if k in kinds)
        todo = [k for k in available if k.name in kinds]
        result.rows.append(("start", _measure()))
        session = session_backend(backend)
        try:
            turn = 0
            for i in range(-warmup * len(todo), cycles):
                if not todo:
                    raise RuntimeError(f"{backend}: every kind was skipped: {result.skipped}")
                kind = todo[turn % len(todo)]
                t0 = time.perf_counter()
                tracer = Tracer(backend=session)
                try:
                    with tracer.trace(*kind.targets) as trace:
                        kind.action()
                except CaptureError as exc:
                    # Only a warm-up cycle, the kind's first, may find it unsupported.
                    if i >= 0 or "not supported" not in str(exc):
                        raise
                    result.skipped[kind.name] = str(exc)
                    todo.remove(kind)
                    continue
                finally:
                    tracer.close()
                turn += 1
                if i >= 0:
                    result.seconds.setdefault(kind.name, []).append(time.perf_counter() - t0)
                if (len(trace.hits), trace.lost) != (kind.hits, 0):
                    result.bad_cycles += 1
                    if len(result.bad) < 5:
                        got = sorted(h.target for h in trace.hits)
                        result.bad.append(
                            f"cycle {i} {kind.name}: {got} (want {kind.hits}), lost {trace.lost}"
                        )
                done = i + 1
                if done == 0:
                    result.rows.append(("warm", _measure()))
                elif done == cycles:
                    result.rows.append(("end", _measure()))
                    if progress is not None:
                        progress(f"{backend}: {done} cycles, done")
                elif done > 0 and done % every == 0:
                    result.rows.append((str(done), _measure()))
                    if progress is not None:
                        progress(f"{backend}: {done}/{cycles} cycles")
        finally:
            session.close()
        result.rows.append(("closed", _measure()))
    return result


_COLUMNS = {
    "fds": "fds",
    "perf_fds": "perf fds",
    "progs": "BPF progs",
    "links": "links",
    "maps": "maps",
    "instances": "tracefs instances",
    "probe_events": "probe events",
    "rss_kib": "RSS (MiB)",
}


def report(results: Sequence[SoakResult]) -> str:
    """Markdown: a summary table, then each backend's measurements."""
    summary = []
    for r in results:
        every = [s for v in r.seconds.values() for s in v]
        kinds = ", ".join(f"{k} {fmt_stat(v)}" for k, v in r.seconds.items())
        growth = r.growth()
        grew = ", ".join(f"{k} {v:+}" for k, v in growth.items() if k != "rss_kib" and v) or "none"
        skipped = "; ".join(f"{k}: {why}" for k, why in r.skipped.items()) or "none"
        summary.append(
            [
                r.backend,
                r.cycles,
                f"{sum(every):.0f}",
                fmt_stat(every),
                kinds,
                grew,
                f"{growth['rss_kib'] / 1024:+.2f}",
                skipped,
                "; ".join(r.problems()) or "passed",
            ]
        )
    head = [
        "backend",
        "cycles",
        "seconds",
        "s/cycle",
        "s/cycle by kind",
        "objects grown (warm -> end)",
        "RSS growth (MiB)",
        "kinds skipped",
        "verdict",
    ]
    out = [markdown_table(head, summary)]
    for r in results:
        rows = [
            [when, *(f"{v / 1024:.1f}" if k == "rss_kib" else v for k, v in u.as_dict().items())]
            for when, u in r.rows
        ]
        out.append(f"\n{r.backend}:\n\n" + markdown_table(["at", *_COLUMNS.values()], rows))
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    results = os.environ.get("PYTEST_LBR_RESULTS")
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="In a pytest-lbr vm guest (PYTEST_LBR_RESULTS set) --out and --markdown "
        "default to soak.json and soak.md in the results directory; elsewhere to stdout.",
    )
    ap.add_argument("--cycles", type=int, default=2000, help="cycles per backend (default 2000)")
    ap.add_argument("--every", type=int, default=200, help="measure every N cycles (default 200)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=WARMUP_TURNS,
        help=f"turns of every kind before the baseline (default {WARMUP_TURNS})",
    )
    ap.add_argument(
        "--backend", action="append", choices=BACKENDS, help="repeat for several (default: both)"
    )
    ap.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        help="cycle kinds to take turns, repeat for several (default: all six)",
    )
    ap.add_argument("--out", type=Path, help="write the results as JSON to this file")
    ap.add_argument("--markdown", type=Path, help="write the tables as markdown to this file")
    args = ap.parse_args(argv)
    if args.cycles < 1 or args.every < 1 or args.warmup < 0:
        ap.error("--cycles and --every must be at least 1, --warmup at least 0")
    if results:
        args.out = args.out or Path(results) / "soak.json"
        args.markdown = args.markdown or Path(results) / "soak.md"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Soak each backend; write the JSON and the tables after each (a crash keeps the first)."""
    args = parse_args(argv)
    results: list[SoakResult] = []
    for backend in args.backend or BACKENDS:
        kinds = args.kind or KINDS
        results.append(
            soak(
                backend,
                args.cycles,
                args.every,
                kinds,
                lambda s: print(s, flush=True),
                warmup=args.warmup,
            )
        )
        save_json(
            args.out,
            {
                "benchmark": "soak",
                "kernel": os.uname().release,
                "backends": [r.as_dict() for r in results],
            },
        )
        text = report(results)
        if args.markdown is None:
            print(text)
        else:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(f"# Soak, {os.uname().release}\n\n{text}")
    return 1 if any(r.problems() for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
