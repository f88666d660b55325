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

This package: the command line (here) and a module per command: `trace.py`, `diff.py`,
`doctor.py`, `fetch_vmlinux.py` (the one place that runs apt-get), `selftest.py`;
`status.py` (the usage error they share; the exit statuses: `pytest_lbr.exit_codes`). Tested by tests/test_cli.py, test_arm64_vmlinux.py, and
in the guests by tests/kernel/test_cli_kernel.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from pytest_lbr.cli.diff import run_diff
from pytest_lbr.cli.doctor import DoctorCheck, doctor_checks, mount_check, run_doctor
from pytest_lbr.cli.status import UsageError
from pytest_lbr.cli.trace import run_trace
from pytest_lbr.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from pytest_lbr.names import BackendName, ColorWhen, LbrFilter, PmuName, choices
from pytest_lbr.progress import set_progress

__all__ = ["DoctorCheck", "build_parser", "doctor_checks", "main", "mount_check"]


# -- command line -----------------------------------------------------------------


def _command(module: str, name: str) -> Callable[[argparse.Namespace, TextIO, TextIO], int]:
    """Command `name` of `pytest_lbr.cli.<module>`, imported on first use."""
    import importlib

    return getattr(importlib.import_module(f"pytest_lbr.cli.{module}"), name)  # type: ignore[no-any-return]


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
    # A module a command; the two that read debug images are imported when asked for.
    commands = {
        "trace": run_trace,
        "diff": run_diff,
        "doctor": run_doctor,
        "fetch-vmlinux": lambda *a: _command("fetch_vmlinux", "run_fetch_vmlinux")(*a),
        "selftest": lambda *a: _command("selftest", "run_selftest")(*a),
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
