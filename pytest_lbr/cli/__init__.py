"""`pytest-lbr`: explore with traces before writing a test.

    pytest-lbr trace TARGET... [--pid P | --cgroup PATH | --all] [--comm NAME] [--json]
                     [--errors-only] [--edges | --disasm] [--color WHEN]
                     [--count N | --duration S]
    pytest-lbr diff A.lbr B.lbr
    pytest-lbr doctor [--mount] [--helpers [--markdown]]
    pytest-lbr fetch-vmlinux [RELEASE]
    pytest-lbr selftest [--out DIR] [--vmlinux PATH] [--compare LBR_REPORT GRAPH_REPORT]

`trace` attaches to any target `lbr.trace` accepts and prints each hit as it
completes (`pytest_lbr.live`): its call tree, its branch records in the retsnoop/bpflbr
format (`--edges`, `--disasm`) or JSON, of every
process but its own unless told whose. `diff` compares two golden files with the
plugin's own parser.
`doctor` says what this machine can trace and, for each thing it cannot, the fix;
with `--mount` it first mounts tracefs. `fetch-vmlinux` downloads Debian's debug
vmlinux into the cache, where traces find it for file:line. Progress of the
library's slow steps goes to stderr.

Exit status: 0 success (trace ended by Ctrl-C included), 1 `diff` found a
difference, `doctor` found tracing impossible or `fetch-vmlinux` could not
fetch, 2 usage or input error, 130 a second Ctrl-C cut a collection short.

This package: the command line (here) and `fetch_vmlinux.py` (the one place that runs
apt-get, for `fetch-vmlinux`). Tested by tests/test_cli.py, test_arm64_vmlinux.py, and
in the guests by tests/kernel/test_cli_kernel.py.
"""

from __future__ import annotations

import argparse
import errno
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from pytest_lbr.model import CALL_KINDS, Branch, Hit, format_branches, format_hit_header
from pytest_lbr.model.text import tree_lines
from pytest_lbr.names import BackendName, ColorWhen, LbrFilter, PmuName, choices
from pytest_lbr.progress import set_progress

__all__ = ["DoctorCheck", "doctor_checks", "main", "mount_check"]

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake on the command line or in an input file: one line, exit 2."""


# -- trace ------------------------------------------------------------------------


class _Stop:
    """SIGINT/SIGTERM: the first asks the loop to hand over what it has and stop, the
    second aborts."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


def _disasm_lines(branch: Branch) -> list[str]:
    """The instructions up to the branch's source: the call (or jump) that was taken."""
    from pytest_lbr.symbols import get_symbolizer
    from pytest_lbr.symbols.disasm import disassemble, function_code

    addr = branch.src.addr
    try:
        # Not annotated with source lines: the branch line above already has them,
        # and annotating every instruction of every function costs a symbolizer
        # run per branch, a DWARF lookup in a debug vmlinux per instruction.
        start, code = function_code(get_symbolizer(), addr)
        insns = disassemble(code, start)
    except (OSError, ValueError) as exc:
        return [f"    ; no disassembly at {branch.src.name}: {exc}"]
    # A source address is either the branch instruction itself (LBR) or the return
    # address after a call (the graph backend): show what leads up to it.
    upto = [i for i in insns if i.addr <= addr]
    if upto and upto[-1].addr == addr and branch.kind not in CALL_KINDS:
        window = upto[-3:]
        mark = addr
    else:
        window = [i for i in insns if i.addr < addr][-3:]
        mark = window[-1].addr if window else addr
    out = []
    for insn in window:
        arrow = "=>" if insn.addr == mark else "  "
        off = insn.addr - (addr - branch.src.offset)
        where = f"{branch.src.symbol}+{off:#x}" if branch.src.symbol else f"{insn.addr:#x}"
        out.append(f"    {arrow} {where:<32} {insn.text}")
    return out


def format_hit(hit: Hit, disasm: bool = False, edges: bool = False, color: bool = False) -> str:
    """A hit as `pytest-lbr trace` prints it: header, then its call tree, or
    (`edges`, `disasm`) one line per branch."""
    lines = [format_hit_header(hit)]
    if not hit.branches:
        return lines[0]
    if not (disasm or edges):
        lines.extend(line.text for line in tree_lines(hit, color=color))
        return "\n".join(lines)
    if not disasm:
        lines.append(format_branches(hit.branches))
        return "\n".join(lines)
    top = len(hit.branches) - 1
    for i, b in enumerate(hit.branches):
        lines.append(format_branches([b], first_index=top if i == 0 else None))
        lines.extend(_disasm_lines(b))
    return "\n".join(lines)


def _trace(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pytest_lbr.capture import CaptureError, Scope
    from pytest_lbr.live import (
        LiveTrace,
        comm_matches,
        hit_json,
        is_error,
        without_return_values,
    )
    from pytest_lbr.targets import TargetError

    try:
        if args.pid is not None:
            scope = Scope.of("process", pid=args.pid)
        elif args.cgroup is not None:
            scope = Scope.of("process", cgroup=args.cgroup)
        else:
            scope = Scope.of("system")
        live = LiveTrace(
            args.targets, backend=args.backend, scope=scope, filter=args.filter, pmu=args.pmu
        )
    except (TargetError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.errors_only:
        silent = without_return_values(live.targets, live.capabilities)
        if len(silent) == len(live.targets):
            raise UsageError(
                f"--errors-only keeps hits that return an error, and "
                f"{', '.join(t.spec for t in silent)} return no value here "
                "(tracepoints, uprobe entries and, on the graph backend, kfunc globs)"
            )
        for t in silent:
            print(f"note: --errors-only: {t.spec} returns no value here: none shown", file=err)
    if args.filter and not live.capabilities.filters:
        print(
            f"note: --filter is an LBR branch filter: ignored by the {live.backend_name} backend",
            file=err,
        )
    if not live.available:
        print(f"pytest-lbr: cannot trace: {live.reason}", file=err)
        return EXIT_FOUND

    color = args.color == ColorWhen.ALWAYS or (args.color == ColorWhen.AUTO and out.isatty())

    def keep(hit: Hit) -> bool:
        if args.errors_only and not is_error(hit.retval):
            return False
        return args.comm is None or comm_matches(hit, args.comm)

    def show(hit: Hit) -> None:
        text = (
            json.dumps(hit_json(hit))
            if args.json
            else format_hit(hit, args.disasm, args.edges, color)
        )
        print(text, file=out, flush=True)

    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    whose = "every process but this one" if scope.kind == "system" else str(scope)
    limit = (
        f"{args.count} hit(s)"
        if args.count is not None
        else f"{args.duration:g} s"
        if args.duration is not None
        else "until Ctrl-C"
    )
    deadline = None if args.duration is None else time.monotonic() + args.duration
    shown = reported = 0
    next_report = 0.0
    noted: set[str] = set()

    def notes() -> None:
        for note in live.notes:
            if note not in noted:
                noted.add(note)
                print(f"note: {note}", file=err, flush=True)

    def done() -> bool:
        return stop.requested or (deadline is not None and time.monotonic() >= deadline)

    try:
        with live:
            # This process reads the trace until it exits: what it holds once armed
            # (symbol tables, the tracer's state) is never garbage, so the collector
            # stops walking it at every collection (a large part of the reader's
            # time per hit otherwise).
            gc.freeze()
            print(
                f"Tracing {', '.join(t.spec for t in live.targets)} with the "
                f"{live.backend_name} backend "
                f"({whose}; {limit}; hits are printed as they complete). Ctrl-C to stop.",
                file=err,
                flush=True,
            )
            notes()
            for batch in live.batches(done):
                for hit in batch:
                    if keep(hit):
                        show(hit)
                        shown += 1
                        if args.count is not None and shown >= args.count:
                            break
                if args.count is not None and shown >= args.count:
                    break
                lost = live.lost
                if lost > reported and time.monotonic() >= next_report:
                    print(f"pytest-lbr: {lost} record(s) lost so far", file=err, flush=True)
                    reported, next_report = lost, time.monotonic() + 1.0
            lost = live.lost
            notes()
    except KeyboardInterrupt:
        print(f"\ninterrupted: {shown} hit(s) shown", file=err)
        return EXIT_INTERRUPTED
    except (CaptureError, TargetError, OSError) as exc:
        print(f"pytest-lbr: {exc}", file=err)
        return EXIT_FOUND
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    print(f"{shown} hit(s), {lost} record(s) lost", file=err)
    return EXIT_OK


# -- diff -------------------------------------------------------------------------


def _diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pytest_lbr.golden import Comparison, GoldenError, parse

    files = []
    for name in (args.a, args.b):
        path = Path(name)
        try:
            files.append(parse(path.read_text(encoding="utf-8"), path))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
        except GoldenError as exc:
            raise UsageError(str(exc)) from None
    a, b = files
    for key in ("kernel", "backend", "level", "arch"):
        if a.header.get(key) != b.header.get(key):
            print(f"# {key}: {a.header.get(key)} -> {b.header.get(key)}", file=out)
    if a.level != b.level:
        raise UsageError(
            f"{args.a} is at level {a.level!r}, {args.b} at {b.level!r}: not comparable"
        )
    cmp = Comparison(a.lines, b.lines, Path(args.a))
    if cmp.matches:
        print(f"identical: {len(a.lines)} edge line(s)", file=out)
        return EXIT_OK
    text = cmp.diff(max_lines=args.max_lines)
    # Comparison names its sides for the test-run case; here both are files.
    text = text.replace(f"--- golden {Path(args.a).name}", f"--- {args.a}", 1)
    text = text.replace("+++ this run", f"+++ {args.b}", 1)
    print(text, file=out)
    print(cmp.first_divergence(), file=out)
    return EXIT_FOUND


# -- doctor -----------------------------------------------------------------------


class DoctorCheck:
    """One line of `pytest-lbr doctor`: what was checked, the answer, and the fix."""

    def __init__(self, name: str, ok: bool, detail: str, fix: str = "") -> None:
        self.name, self.ok, self.detail, self.fix = name, ok, detail, fix

    def __str__(self) -> str:
        line = f"[{'ok' if self.ok else 'no'}] {self.name}: {self.detail}"
        return line if self.ok or not self.fix else f"{line}\n     fix: {self.fix}"


def _check(name: str, fn: Callable[[], DoctorCheck]) -> DoctorCheck:
    from pytest_lbr.bpf.libbpf import libbpf_messages

    try:
        with libbpf_messages():  # the check's answer says it; libbpf's chatter would not
            return fn()
    except Exception as exc:  # a check must answer, not crash the report
        return DoctorCheck(name, False, f"check failed: {type(exc).__name__}: {exc}")


def _root() -> DoctorCheck:
    if os.geteuid() == 0:
        return DoctorCheck("root", True, "running as root")
    return DoctorCheck(
        "root",
        False,
        f"running as uid {os.geteuid()}: BPF tracing and ftrace need root",
        "run as root (sudo pytest-lbr ...), or in a guest: pytest-lbr vm --kernel 6.12",
    )


def _btf() -> DoctorCheck:
    from pytest_lbr.kernel.machine import BTF_PATH, machine

    size = machine().btf_size
    if size is not None:
        return DoctorCheck("BTF", True, f"{BTF_PATH} ({size} bytes)")
    return DoctorCheck(
        "BTF", False, f"no {BTF_PATH}", "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )


def _fentry() -> DoctorCheck:
    from pytest_lbr.capture.hooks.hook_set import try_load_fexit

    try:
        try_load_fexit("vfs_write")
    except Exception as exc:
        code = getattr(exc, "errno", None)
        why = "EPERM: refused (kernel lockdown?)" if code == errno.EPERM else str(exc)
        return DoctorCheck(
            "fentry",
            False,
            f"fexit program on vfs_write does not load: {why}",
            "trace in a guest with a stock kernel: pytest-lbr vm --kernel 6.12 (docs/ci.md)",
        )
    return DoctorCheck("fentry", True, "fexit program on vfs_write loads")


def _kprobe_multi() -> DoctorCheck:
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.targets import parse_target

    try:
        with HookSet([parse_target("kfunc:vfs_writ*")], snapshot=False, fallback="kprobe") as hs:
            notes = list(hs.notes)
    except OSError as exc:
        return DoctorCheck(
            "kprobe.multi",
            False,
            f"neither kprobe.multi nor single kprobes attach to vfs_write: {exc.strerror}",
            "needs CONFIG_KPROBES=y (and CONFIG_FPROBE=y for kprobe.multi): run in a guest "
            "(pytest-lbr vm --kernel 6.12)",
        )
    if notes:
        return DoctorCheck(
            "kprobe.multi",
            False,
            notes[0],
            "globs still work, attached one kprobe per function (slower); kprobe.multi "
            "needs Linux >= 5.18 with CONFIG_FPROBE=y",
        )
    return DoctorCheck(
        "kprobe.multi", True, "kfunc:vfs_writ* attached through one kprobe.multi link"
    )


def _pmu() -> DoctorCheck:
    from pytest_lbr.kernel import perf

    attr = perf.perf_event_attr()
    attr.size = perf.ctypes.sizeof(attr)
    attr.type = perf.PERF_TYPE_HARDWARE
    attr.config = perf.PERF_COUNT_HW_CPU_CYCLES
    try:
        fd = perf.perf_event_open(attr, -1, perf.online_cpus()[0])
    except OSError as exc:
        fix = (
            "no hardware PMU here (a VM without vPMU?): on an Intel KVM host boot the guest "
            "with -cpu host,pmu=on (pytest-lbr vm does, docs/ci.md)"
        )
        return DoctorCheck(
            "PMU", False, f"perf_event_open(cycles) failed: {os.strerror(exc.errno or 0)}", fix
        )
    os.close(fd)
    return DoctorCheck("PMU", True, "hardware cycles counter opens")


def _lbr() -> DoctorCheck:
    from pytest_lbr.capture import probe
    from pytest_lbr.kernel.machine import machine

    here = machine()
    depth = here.lbr_caps
    cap = probe("lbr")
    detail = f"depth {depth}" if depth else "no LBR depth (no cpu/caps/branches)"
    if cap.available:
        return DoctorCheck("LBR", True, f"{detail}; bpf_get_branch_snapshot() returns records")
    fix = (
        "LBR needs an Intel CPU with legacy LBR (or AMD LBRv2) on bare metal or KVM with "
        "lbr-fmt passthrough; elsewhere use --lbr-backend=graph"
        if here.name == "x86_64"
        else f"no {here.name} kernel gives bpf_get_branch_snapshot() branch records "
        "yet: the graph backend (--lbr-backend=graph, what auto picks) traces here"
    )
    return DoctorCheck("LBR", False, f"{detail}; {cap.reason}", fix)


def _graph() -> DoctorCheck:
    from pytest_lbr.capture import probe
    from pytest_lbr.kernel.tracefs import TRACEFS_MOUNT_COMMAND, find_tracefs

    cap = probe("graph")
    if cap.available:
        return DoctorCheck("tracefs", True, "function tracer works in a private tracefs instance")
    if os.geteuid() == 0 and find_tracefs() is None:
        fix = f"pytest-lbr doctor --mount mounts it (or, as root: {TRACEFS_MOUNT_COMMAND})"
    else:
        fix = (
            "the graph backend needs the ftrace function tracer as root: run in a guest "
            "(pytest-lbr vm --kernel 6.12)"
        )
    return DoctorCheck("tracefs", False, cap.reason, fix)


def mount_check() -> DoctorCheck:
    """`doctor --mount`: mount tracefs where it is not (the one command that mounts)."""
    from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS, TracefsError, find_tracefs, mount_tracefs

    if find_tracefs() == Path(TRACEFS_MOUNTS[0]):
        return DoctorCheck("mount tracefs", True, f"already mounted at {TRACEFS_MOUNTS[0]}")
    try:
        return DoctorCheck("mount tracefs", True, f"mounted at {mount_tracefs()}")
    except TracefsError as exc:
        return DoctorCheck(
            "mount tracefs",
            False,
            exc.strerror or str(exc),
            "mount needs root: sudo pytest-lbr doctor --mount, or run in a guest "
            "(pytest-lbr vm --kernel 6.12 mounts it)",
        )


def _vmlinux(explicit: str | None) -> Callable[[], DoctorCheck]:
    def check() -> DoctorCheck:
        from pytest_lbr.symbols.vmlinux import find_vmlinux, running_build_id

        path, status = find_vmlinux(explicit)
        running = running_build_id() or "unreadable"
        if path is not None:
            return DoctorCheck("debug vmlinux", True, status)
        release = os.uname().release
        if running not in status:
            status = f"{status} (running build-id {running})"
        return DoctorCheck(
            "debug vmlinux",
            False,
            status,
            f"install the kernel's debug image (Debian: apt install linux-image-{release}-dbg, "
            "or pytest-lbr fetch-vmlinux into the cache) or pass --lbr-vmlinux=PATH; traces "
            "then get file:line",
        )

    return check


def doctor_checks(vmlinux: str | None = None) -> list[DoctorCheck]:
    """Every check `pytest-lbr doctor` prints, in order."""
    checks: list[tuple[str, Callable[[], DoctorCheck]]] = [
        ("root", _root),
        ("BTF", _btf),
        ("fentry", _fentry),
        ("kprobe.multi", _kprobe_multi),
        ("PMU", _pmu),
        ("LBR", _lbr),
        ("tracefs", _graph),
        ("debug vmlinux", _vmlinux(vmlinux)),
    ]
    return [_check(name, fn) for name, fn in checks]


def _doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pytest_lbr.tracer import Tracer

    print(f"pytest-lbr doctor: kernel {os.uname().release} {os.uname().machine}", file=out)
    if args.helpers:
        return _doctor_helpers(args, out, err)
    if args.mount:  # first: the checks below then see tracefs mounted
        print(_check("mount tracefs", mount_check), file=out, flush=True)
    for check in doctor_checks(args.vmlinux):
        print(check, file=out, flush=True)
    from pytest_lbr.bpf.libbpf import libbpf_messages

    tracer = Tracer("auto")
    with libbpf_messages():
        available = tracer.available
    if available:
        print(f"=> tracing works here: backend {tracer.backend}", file=out)
        return EXIT_OK
    print(f"=> no tracing here: {tracer.reason}", file=out)
    return EXIT_FOUND


def _doctor_helpers(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`doctor --helpers`: each helper, its implementation, and how each backend sees it."""
    from pytest_lbr.capture.helper_table import format_rows, read_rows

    if args.mount:
        print(_check("mount tracefs", mount_check), file=out, flush=True)
    rows, why = read_rows()
    if not rows:
        print(f"pytest-lbr doctor --helpers: {why}", file=err)
        return EXIT_FOUND
    print(format_rows(rows, markdown=args.markdown), file=out)
    if why:
        print(f"note: implementations incomplete: {why}", file=err)
    return EXIT_OK


# -- fetch-vmlinux ----------------------------------------------------------------


def _fetch_vmlinux(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pytest_lbr.cli.fetch_vmlinux import fetch_debian_dbg
    from pytest_lbr.symbols.vmlinux import VmlinuxError

    release = args.release or os.uname().release
    try:
        path = fetch_debian_dbg(release)
    except (VmlinuxError, OSError) as exc:
        print(f"pytest-lbr: cannot fetch the debug vmlinux of {release}: {exc}", file=err)
        return EXIT_FOUND
    print(path, file=out)  # alone on stdout: --lbr-vmlinux=$(pytest-lbr fetch-vmlinux)
    return EXIT_OK


# -- selftest ---------------------------------------------------------------------


def _selftest(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pytest_lbr import selftest

    if args.compare:
        from pytest_lbr.selftest.compare import ReportError, compare_reports

        try:
            results = compare_reports(Path(args.compare[0]), Path(args.compare[1]))
        except ReportError as exc:
            raise UsageError(str(exc)) from None
        for r in results:
            print(r, file=out)
        return EXIT_FOUND if any(r.status == selftest.FAIL for r in results) else EXIT_OK
    print(f"pytest-lbr selftest: kernel {os.uname().release} {os.uname().machine}", file=out)
    bundle = selftest.run_selftest(
        args.vmlinux,
        doctor=lambda: doctor_checks(args.vmlinux),
        progress=lambda line: print(line, file=out, flush=True),
    )
    try:
        paths = selftest.write_bundle(bundle, Path(args.out))
    except OSError as exc:
        print(
            f"pytest-lbr: cannot write the bundle to {args.out}: {exc.strerror} (pass --out DIR)",
            file=err,
        )
        return EXIT_FOUND
    print(bundle.text().splitlines()[-1], file=out)
    print(f"bundle: {paths[0]} {paths[1]} (attach both to an issue)", file=out)
    return EXIT_FOUND if bundle.failed else EXIT_OK


# -- command line -----------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value

    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pytest-lbr", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    tr = sub.add_parser("trace", help="attach to targets and print each hit's calls")
    tr.add_argument(
        "targets", nargs="+", metavar="TARGET", help="kfunc:NAME, prog:ID, tp:CAT/NAME ..."
    )
    tr.add_argument(
        "--backend",
        choices=choices(BackendName),
        default=BackendName.AUTO.value,
        help="auto (default): LBR where the CPU has it, else graph",
    )
    tr.add_argument(
        "--pmu",
        choices=choices(PmuName),
        default=PmuName.HARDWARE.value,
        help="what the lbr backend runs on: hardware (default: the CPU's LBR) or software "
        "(software perf events: every hit, no branches, where no CPU has LBR)",
    )
    tr.add_argument("--filter", choices=choices(LbrFilter), help="LBR branch filter (LBR only)")
    shown = tr.add_mutually_exclusive_group()
    shown.add_argument(
        "--edges", action="store_true", help="branch records (src -> dst), not call trees"
    )
    shown.add_argument(
        "--disasm", action="store_true", help="branch records with the instructions at each"
    )
    tr.add_argument(
        "--color",
        choices=choices(ColorWhen),
        default=ColorWhen.AUTO.value,
        help="colour the call trees: auto (default: on a terminal), always, never",
    )
    whose = tr.add_mutually_exclusive_group()
    whose.add_argument("--pid", type=_positive(int), metavar="P", help="trace process P only")
    whose.add_argument(
        "--cgroup", metavar="PATH", help="trace the tasks of this cgroup v2 directory only"
    )
    whose.add_argument(
        "--all",
        action="store_true",
        help="trace every process but this one, and interrupts (the default)",
    )
    tr.add_argument("--comm", metavar="NAME", help="only hits of tasks whose comm matches (glob)")
    tr.add_argument("--json", action="store_true", help="one JSON object per hit and line")
    tr.add_argument(
        "--errors-only",
        action="store_true",
        help="only hits that return an error (a negative errno, -4095..-1)",
    )
    stop = tr.add_mutually_exclusive_group()
    stop.add_argument("--count", type=_positive(int), help="stop after N printed hits")
    stop.add_argument("--duration", type=_positive(float), help="stop after S seconds")
    df = sub.add_parser("diff", help="compare two golden trace files")
    df.add_argument("a", metavar="A.lbr")
    df.add_argument("b", metavar="B.lbr")
    df.add_argument("--max-lines", type=int, default=400, help=argparse.SUPPRESS)
    sub.add_parser(
        "vm",
        help="boot kernels with virtme-ng and run pytest or a command in each "
        "(pytest-lbr vm --help)",
        add_help=False,
    )
    sub.add_parser(
        "bisect",
        help="find the commit that changed a golden trace: a BPF program's history or a "
        "kernel's, with git bisect (pytest-lbr bisect --help)",
        add_help=False,
    )
    dr = sub.add_parser("doctor", help="what this machine can trace, and the fix for what not")
    dr.add_argument("--vmlinux", metavar="PATH", help="debug vmlinux to check")
    dr.add_argument(
        "--mount",
        action="store_true",
        help="mount tracefs at /sys/kernel/tracing first if it is not mounted (root)",
    )
    dr.add_argument(
        "--helpers",
        action="store_true",
        help="list each BPF helper: its C name, the function implementing it, whether the "
        "function tracer can patch it, and how each backend observes its calls (root)",
    )
    dr.add_argument("--markdown", action="store_true", help="with --helpers: a Markdown table")
    fv = sub.add_parser(
        "fetch-vmlinux",
        help="download Debian's debug vmlinux into the cache (apt-get) and print its path",
    )
    fv.add_argument(
        "release", nargs="?", metavar="RELEASE", help="kernel release (default: the running one)"
    )
    st = sub.add_parser(
        "selftest", help="check the LBR path and both backends here; write a report bundle"
    )
    st.add_argument(
        "--out",
        metavar="DIR",
        default="lbr-selftest",
        help="bundle directory (default lbr-selftest)",
    )
    st.add_argument("--vmlinux", metavar="PATH", help="debug vmlinux for file:line")
    st.add_argument(
        "--compare",
        nargs=2,
        metavar=("LBR_REPORT", "GRAPH_REPORT"),
        help="instead: compare two --lbr-report directories of one suite (LBR vs graph)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of the `pytest-lbr` console script."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["vm"]:  # its own parser: everything after `--` goes to pytest
        from pytest_lbr.vm import main as vm_main

        return vm_main(argv[1:])
    if argv[:1] == ["bisect"]:  # its own parser too (pytest's arguments after `--`)
        from pytest_lbr.bisect.driver import main as bisect_main

        return bisect_main(argv[1:], out, err)
    commands = {
        "trace": _trace,
        "diff": _diff,
        "doctor": _doctor,
        "fetch-vmlinux": _fetch_vmlinux,
        "selftest": _selftest,
    }
    previous = set_progress(lambda message: print(f"pytest-lbr: {message}", file=err, flush=True))
    try:
        args = build_parser().parse_args(argv)
        return commands[args.cmd](args, out, err)
    except UsageError as exc:
        print(f"pytest-lbr: error: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted", file=err)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `pytest-lbr trace ... | head`
        return EXIT_OK
    finally:
        set_progress(previous)


if __name__ == "__main__":
    sys.exit(main())
