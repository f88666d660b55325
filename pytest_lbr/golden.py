"""Golden traces: serialize, parse, compare and store the reviewable `.lbr` files.

A golden file lives beside the test module::

    tests/__lbr_golden__/test_net/test_connect.lbr         default
    tests/__lbr_golden__/test_net/test_connect@6.12.lbr    wins on 6.12.x kernels

and reads like this (addresses never appear, so KASLR and JIT placement don't matter)::

    # pytest-lbr golden trace
    # format: 1
    # kernel: 6.12.117+deb12-amd64
    # arch: x86_64
    # backend: graph
    # level: function
    hit kfunc:vfs_write
    vfs_write -> rw_verify_area
    vfs_write -> write_null

`normalize` turns a `Trace` into those edge lines; it drops what is not the code
under test (interrupts, softirq and RCU work that happened to run, the tracer's own
machinery: `DEFAULT_EXCLUDE`) and collapses repetitions whose count varies from run
to run. Only the edge lines are compared; the header says where they came from.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_lbr.model import Branch, Trace

__all__ = [
    "DEFAULT_EXCLUDE",
    "FORMAT_VERSION",
    "GOLDEN_DIR",
    "LEVELS",
    "Comparison",
    "GoldenError",
    "GoldenFile",
    "Normalization",
    "compare",
    "golden_path",
    "kernel_series",
    "normalize",
    "parse",
    "serialize",
    "write_atomic",
]

#: Version of the file format; a file with another version is refused, not guessed at.
FORMAT_VERSION = 1
#: Directory beside the test module that holds golden traces.
GOLDEN_DIR = "__lbr_golden__"
#: Levels of detail: call edges by function name, symbol+offset, or file:line.
LEVELS = ("function", "symbol", "line")
_MAGIC = "# pytest-lbr golden trace"
_CALLS = ("call", "ind_call")

#: Functions that are noise rather than the code under test, with everything they call.
#: Interrupts and exceptions arrive whenever the timer says so; softirq and RCU work
#: runs on their way out; the tracer itself (BPF trampolines, ftrace/fgraph, rethook,
#: the ring buffer) shows up around every hit. A test that wants one of them back
#: lists it in `keep=` (marker) or removes it with the `lbr_golden_keep` ini key.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    # hard and soft interrupts, exceptions, IPIs
    "asm_*",
    "sysvec_*",
    "__sysvec_*",
    "common_interrupt",
    "__common_interrupt",
    "irq_enter*",
    "irq_exit*",
    "irqentry_*",
    "handle_irq*",
    "handle_edge_irq",
    "handle_fasteoi_irq",
    "generic_handle_*",
    "exc_page_fault",
    "do_softirq*",
    "__do_softirq",
    "handle_softirqs",
    "__irq_exit_rcu",
    "invoke_softirq",
    "raise_softirq*",
    "__raise_softirq*",
    "tasklet_*",
    "flush_smp_call_function_*",
    "generic_smp_call_function_*",
    # timers and scheduler ticks that interrupt the traced code
    "hrtimer_*",
    "__hrtimer_*",
    "tick_*",
    "update_process_times",
    "scheduler_tick",
    "sched_tick",
    "run_timer_softirq",
    "run_local_timers",
    "timekeeping_*",
    "ktime_get*",
    # RCU bookkeeping (the tracer's programs run under RCU)
    "rcu_*",
    "__rcu_*",
    # the scheduler, entered at a preemption point (cond_resched, preempt_enable)
    # when the time slice happens to run out: another task runs in between
    "__schedule",
    "schedule",
    "preempt_schedule*",
    "finish_task_switch*",
    "__traceiter_sched_*",
    # slab and page allocator slow paths: whether a free or an allocation takes
    # them depends on what the allocator has cached, not on the code under test
    "___slab_alloc",
    "__slab_alloc*",
    "__slab_free",
    "put_cpu_partial",
    "__put_partials",
    "__unfreeze_partials",
    "unfreeze_partials*",
    "get_partial*",
    "deactivate_slab",
    "discard_slab",
    "new_slab",
    "allocate_slab",
    "__free_slab",
    "free_slab",
    "refill_obj_stock",
    "drain_obj_stock",
    "__alloc_pages*",
    "get_page_from_freelist",
    "rmqueue*",
    "__rmqueue*",
    "free_unref_page*",
    "free_pcppages_bulk",
    "__free_pages*",
    "__free_one_page",
    # tracer machinery: BPF trampolines, ftrace/fgraph, kprobes, perf, ring buffers
    "__bpf_prog_enter*",
    "__bpf_prog_exit*",
    "__bpf_tramp_*",
    "bpf_trampoline_*",
    "bpf_get_branch_snapshot",
    "bpf_get_smp_processor_id",
    "bpf_ringbuf_*",
    "bpf_perf_event_output",
    "migrate_disable",
    "migrate_enable",
    "preempt_count_*",
    "ftrace_*",
    "function_graph_*",
    "fgraph_*",
    "prepare_ftrace_return",
    "return_to_handler",
    "trace_graph_*",
    "kprobe_*",
    "rethook_*",
    "arch_rethook_*",
    "fprobe_*",
    "perf_*",
    "__perf_*",
)


class GoldenError(Exception):
    """A golden file that cannot be used (corrupt, empty, foreign); one actionable message."""


@dataclass(frozen=True)
class Normalization:
    """What `normalize` drops and folds; per test via the marker's keyword arguments."""

    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    #: Patterns taken back out of `exclude` (e.g. a test about RCU keeps "rcu_*").
    keep: tuple[str, ...] = ()
    #: Fold immediately repeated runs of up to `max_repeat_block` lines into one copy.
    collapse: bool = True
    max_repeat_block: int = 8
    #: Sort hits by content: for targets that fire on several CPUs in any order.
    sort_hits: bool = False

    def excluded(self, symbol: str | None) -> bool:
        if symbol is None:
            return False
        if any(fnmatch.fnmatchcase(symbol, p) for p in self.keep):
            return False
        return any(fnmatch.fnmatchcase(symbol, p) for p in self.exclude)


@dataclass
class GoldenFile:
    """A parsed golden file: header fields and edge lines."""

    header: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def level(self) -> str:
        return self.header.get("level", "function")

    @property
    def backend(self) -> str:
        return self.header.get("backend", "")


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing a trace with its golden file."""

    expected: list[str]
    actual: list[str]
    path: Path

    @property
    def matches(self) -> bool:
        return self.expected == self.actual

    def first_divergence(self) -> str:
        """One sentence naming the first edge line that differs."""
        for i, (want, got) in enumerate(zip(self.expected, self.actual, strict=False)):
            if want != got:
                return f"first divergence at edge {i + 1}: expected {want!r}, got {got!r}"
        n = min(len(self.expected), len(self.actual))
        if len(self.actual) > n:
            return f"first divergence at edge {n + 1}: unexpected {self.actual[n]!r}"
        if len(self.expected) > n:
            return f"first divergence at edge {n + 1}: missing {self.expected[n]!r}"
        return "no divergence"

    def diff(self, max_lines: int = 200) -> str:
        """Unified diff golden -> trace, cut after `max_lines` lines."""
        lines = list(
            difflib.unified_diff(
                self.expected,
                self.actual,
                fromfile=f"golden {self.path.name}",
                tofile="this run",
                lineterm="",
                n=2,
            )
        )
        if len(lines) > max_lines:
            lines = [*lines[:max_lines], f"... {len(lines) - max_lines} more diff lines"]
        return "\n".join(lines)


# -- normalisation -------------------------------------------------------------

_PROG_ID_RE = re.compile(r"^(prog:)?\d+$")


def _target_label(target: str) -> str:
    # Program ids change with every load; names and tags do not.
    return "prog:<id>" if _PROG_ID_RE.match(target) else target


def _endpoint(branch: Branch, level: str, side: str) -> str:
    loc = branch.src if side == "src" else branch.dst
    sym = loc.symbol or "?"
    if level == "function":
        return sym
    if level == "symbol":
        return f"{sym}+{loc.offset:#x}" if loc.symbol else "?"
    return f"{sym} ({loc.source})" if loc.source else f"{sym} (?)"


def _edge(branch: Branch, level: str) -> str | None:
    if level == "function":
        if branch.kind not in _CALLS:
            return None
        return f"{_endpoint(branch, level, 'src')} -> {_endpoint(branch, level, 'dst')}"
    src, dst = _endpoint(branch, level, "src"), _endpoint(branch, level, "dst")
    return f"{branch.kind} {src} -> {dst}"


def _hit_edges(branches: Sequence[Branch], level: str, norm: Normalization) -> list[str]:
    balanced = any(b.kind == "ret" for b in branches)
    out: list[str] = []
    skip_depth = 0
    for b in branches:
        if skip_depth:
            # Inside an excluded function: drop its whole subtree (needs call/ret pairs).
            if b.kind in _CALLS:
                skip_depth += 1
            elif b.kind == "ret":
                skip_depth -= 1
            continue
        if b.kind in _CALLS and (norm.excluded(b.dst.symbol) or norm.excluded(b.src.symbol)):
            # A call into an excluded function, or made by one that was entered
            # unseen (notrace, like __schedule): the callee's subtree is noise too.
            skip_depth = 1 if balanced else 0
            continue
        if norm.excluded(b.src.symbol) or norm.excluded(b.dst.symbol):
            continue
        line = _edge(b, level)
        if line is not None:
            out.append(line)
    return _collapse_repeats(out, norm.max_repeat_block) if norm.collapse else out


def _collapse_repeats(lines: list[str], max_block: int) -> list[str]:
    """Fold `X X X` -> `X` and `A B A B` -> `A B` (loop counts vary from run to run)."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        for size in range(1, max_block + 1):
            if len(out) >= 2 * size and out[-size:] == out[-2 * size : -size]:
                del out[-size:]
                break
    return out


def normalize(
    trace: Trace, level: str = "function", norm: Normalization | None = None
) -> list[str]:
    """The edge lines of `trace` at `level`: what a golden file stores and compares."""
    if level not in LEVELS:
        raise ValueError(f"unknown golden level {level!r}; expected one of {', '.join(LEVELS)}")
    norm = norm or Normalization()
    blocks: list[list[str]] = []
    for hit in trace.hits:
        edges = _hit_edges(hit.branches, level, norm)
        blocks.append([f"hit {_target_label(hit.target)}", *edges])
    if norm.sort_hits:
        blocks.sort()
    lines = [line for block in blocks for line in block]
    # Hits that fire once per loop iteration fold like repeated edges do.
    return _collapse_repeats(lines, norm.max_repeat_block) if norm.collapse else lines


# -- file format ---------------------------------------------------------------


def serialize(trace: Trace, lines: Iterable[str], level: str) -> str:
    """The text of a golden file for `trace` (already normalised to `lines`)."""
    header = [
        _MAGIC,
        f"# format: {FORMAT_VERSION}",
        f"# kernel: {trace.kernel_release or os.uname().release}",
        f"# arch: {trace.arch}",
        f"# backend: {trace.backend}",
        f"# level: {level}",
    ]
    return "\n".join([*header, *lines]) + "\n"


def parse(text: str, path: Path | str = "<golden>") -> GoldenFile:
    """Parse a golden file; `GoldenError` says exactly what is wrong with it."""
    if not text.strip():
        raise GoldenError(f"{path}: empty golden file: re-create it with --lbr-golden-update")
    rows = text.splitlines()
    if rows[0] != _MAGIC:
        raise GoldenError(
            f"{path}:1: not a pytest-lbr golden trace (first line should be {_MAGIC!r})"
        )
    golden = GoldenFile()
    for n, row in enumerate(rows[1:], start=2):
        if row.startswith("#"):
            key, sep, value = row[1:].partition(":")
            if not sep:
                raise GoldenError(f"{path}:{n}: malformed header line {row!r}")
            golden.header[key.strip()] = value.strip()
        elif row.startswith("hit ") or " -> " in row:
            golden.lines.append(row)
        elif row.strip():
            raise GoldenError(f"{path}:{n}: not an edge line (want 'a -> b' or 'hit T'): {row!r}")
    version = golden.header.get("format")
    if version != str(FORMAT_VERSION):
        raise GoldenError(
            f"{path}: golden format version {version!r}, this pytest-lbr reads "
            f"{FORMAT_VERSION}: re-create it with --lbr-golden-update"
        )
    missing = [k for k in ("kernel", "arch", "backend", "level") if k not in golden.header]
    if missing:
        raise GoldenError(f"{path}: header lacks {', '.join(missing)}")
    if golden.level not in LEVELS:
        raise GoldenError(f"{path}: unknown level {golden.level!r}")
    return golden


def compare(trace: Trace, golden: GoldenFile, path: Path, actual: list[str]) -> Comparison:
    """Compare normalised `actual` lines of `trace` with `golden`; foreign files raise."""
    if golden.backend != trace.backend:
        raise GoldenError(
            f"{path}: recorded with the {golden.backend} backend, this trace is from "
            f"{trace.backend}: pass --lbr-backend={golden.backend} or re-record"
        )
    if golden.header.get("arch") != trace.arch:
        raise GoldenError(
            f"{path}: recorded on {golden.header.get('arch')}, running on {trace.arch}"
        )
    return Comparison(golden.lines, actual, path)


# -- storage -------------------------------------------------------------------


def kernel_series(release: str) -> str:
    """`6.12.117+deb12-amd64` -> `6.12` (the part a series variant is named by)."""
    m = re.match(r"^(\d+\.\d+)", release)
    return m.group(1) if m else release


_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]@]")


def golden_path(module_path: Path, test_name: str, release: str) -> tuple[Path, Path]:
    """(path to read, default path) for a test; the series variant wins if it exists."""
    name = _UNSAFE.sub("_", test_name)
    folder = module_path.parent / GOLDEN_DIR / module_path.stem
    default = folder / f"{name}.lbr"
    variant = folder / f"{name}@{kernel_series(release)}.lbr"
    return (variant if variant.exists() else default), default


def write_atomic(path: Path, text: str) -> None:
    """Write `path` via a temporary file and rename: readers (and xdist workers) never
    see half a file; mode 0644 whatever the umask, directories 0755."""
    for parent in reversed([path.parent, *path.parent.parents]):
        if not parent.exists():
            try:
                parent.mkdir()
            except FileExistsError:  # another xdist worker made it first
                continue
            parent.chmod(0o755)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
