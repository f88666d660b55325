"""`pytest-lbr trace`: attach to targets and print each hit as it completes."""

from __future__ import annotations

import argparse
import gc
import json
import signal
import time
from types import FrameType
from typing import TextIO

from pytest_lbr.cli.status import UsageError
from pytest_lbr.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from pytest_lbr.model import CALL_KINDS, Branch, Hit, format_branches, format_hit_header
from pytest_lbr.model.text import tree_lines
from pytest_lbr.names import ColorWhen

__all__ = ["format_hit", "run_trace"]


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


def run_trace(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`pytest-lbr trace TARGET...` with the parsed `args`: its exit status."""
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
        return EXIT_FAILED

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
        return EXIT_FAILED
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    print(f"{shown} hit(s), {lost} record(s) lost", file=err)
    return EXIT_OK
