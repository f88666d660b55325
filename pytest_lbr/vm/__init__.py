"""`pytest-lbr vm`: boot kernels with virtme-ng and run pytest (or any command) in them.

Host side (`pytest-lbr vm --kernel 6.1 --kernel 6.12 -- PYTEST ARGS`): picks
each kernel image, KVM or TCG, LBR passthrough where the host has it, runs one
`vng` guest per kernel (side by side, bounded by the host's cores), watches for
boot and for the end, fails a guest whose kernel log holds a splat its pytest did not
report, and prints one summary with one exit status (the worst).
The guest starts in the caller's working directory (virtme-ng shares the host's
root filesystem read-only), so relative paths and node ids are as on the host;
only the results directory and `--rw` directories are writable.

This module is the command line and the names callers use; the work is done by
`vm.host` (the kernel, the tools, KVM, LBR passthrough), `vm.plan` (the vng
command of one guest), `vm.env` (the environment a guest gets from the host),
`vm.run` (running a guest, how it ended) and `vm.guest` (the side inside the
guest, `python -m pytest_lbr.vm guest ...`, through `__main__.py`); `vm.messages` holds its
lines and its error, `vm.root` a guest root file system of its own (`--arch arm64
--root`), `vm.coverage` the one `--lbr-cov-report` it writes on the host from the
guests' coverage records. Tested by tests/test_vm.py, test_vm_root.py,
test_vm_coverage.py, test_bisect.py (the runner's lines) and test_adoption.py (a
third-party project through the wheel).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_lbr.exit_codes import EXIT_CANNOT_TEST, EXIT_NO_GUEST
from pytest_lbr.guest_mode import Shard
from pytest_lbr.vm.coverage import split_coverage_args
from pytest_lbr.vm.env import GUEST_ENV_FILE, env_option, guest_environment
from pytest_lbr.vm.guest import guest_cli, guest_main
from pytest_lbr.vm.host import (
    find_tools,
    kernel_label,
    kvm_failure,
    kvm_usable,
    lbr_passthrough_opts,
    resolve_kernel,
    strip_escapes,
)
from pytest_lbr.vm.messages import VmError, say
from pytest_lbr.vm.plan import VmPlan, build_command, claim_results_dir
from pytest_lbr.vm.root import GuestRoot, RootError, machine_name
from pytest_lbr.vm.run import (
    STARTED,
    STATUS,
    GuestError,
    GuestResult,
    bisect_status,
    read_guest_results,
    run_vm,
    stop_guests,
    unreported_splats,
    worst_status,
    write_guest_record,
    write_summary,
)

__all__ = [
    "GUEST_ENV_FILE",
    "STARTED",
    "STATUS",
    "GuestResult",
    "VmError",
    "VmPlan",
    "bisect_status",
    "build_command",
    "build_parser",
    "claim_results_dir",
    "env_option",
    "find_tools",
    "guest_environment",
    "guest_main",
    "kernel_label",
    "kvm_failure",
    "kvm_usable",
    "lbr_passthrough_opts",
    "main",
    "resolve_kernel",
    "run_vm",
    "strip_escapes",
    "unreported_splats",
    "worst_status",
]

#: Results directory, relative to the caller's working directory.
DEFAULT_RESULTS = "lbr-results"


USAGE = """pytest-lbr vm [--kernel K]... [options] [-- PYTEST ARGS]
       pytest-lbr vm --kernel K --exec "COMMAND"
"""


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--shard {text!r}: ")) from None


def _env(text: str) -> tuple[str, str | None]:
    try:
        return env_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--env {text!r}: ")) from None


def build_parser() -> argparse.ArgumentParser:
    """The `pytest-lbr vm` options."""
    parser = argparse.ArgumentParser(
        prog="pytest-lbr vm",
        usage=USAGE,
        description="Boot kernels with virtme-ng and run pytest (or a command) in each, as root, "
        "in this directory. Exit status: pytest's (the worst over kernels); "
        f"{EXIT_NO_GUEST} when a guest never reported (no boot, panic, hang, tool missing).",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="K",
        help="6.1, 6.12 (newest installed /boot/vmlinuz-<series>.*), an exact release to pin "
        "(6.1.0-56-amd64: /boot/vmlinuz-<release>, from package linux-image-<release>), a "
        "kernel image, or a tree built with vng --build; repeat for several (default: 6.12)",
    )
    parser.add_argument(
        "--arch",
        help="the guest's architecture: x86_64 (the default on an x86-64 host) or arm64, "
        "emulated, from its own --root",
    )
    parser.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="boot this root file system (with Python and pytest-lbr installed) instead of "
        "the host's; --kernel 6.1 then means its boot/vmlinuz-6.1.* (default: its newest)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help=f"results directory; one subdirectory per kernel (default: ./{DEFAULT_RESULTS})",
    )
    parser.add_argument(
        "--rw",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="make this directory writable in the guest (e.g. to update golden files)",
    )
    parser.add_argument("--exec", dest="execute", metavar="COMMAND", help="run COMMAND, not pytest")
    parser.add_argument(
        "--env",
        "-e",
        type=_env,
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="set NAME in the guest (to VALUE, or to its value here), like docker run -e; "
        "repeatable. The guest gets none of this environment but its PYTEST_* variables "
        "(PYTEST_ADDOPTS, PYTEST_PLUGINS, ...)",
    )
    parser.add_argument("--shard", type=_shard, metavar="I/N", help="run shard I of N")
    parser.add_argument(
        "--bisect",
        action="store_true",
        help="exit 0 (good), 1 (bad) or 125 (skip: anything that is not a test verdict)",
    )
    parser.add_argument(
        "--no-strict",
        dest="strict",
        action="store_false",
        help="let kernel tests skip in the guest (default: a skip fails unless allow_skip)",
    )
    parser.add_argument(
        "--jobs", type=int, help="guests at once (default: as many as the host's cores hold)"
    )
    parser.add_argument("--memory", default="2G")
    parser.add_argument("--cpus", type=int, help="vCPUs per guest (default: 2)")
    parser.add_argument("--timeout", type=float, default=1500.0, help="whole-run limit, seconds")
    parser.add_argument(
        "--boot-timeout", type=float, default=300.0, help="limit for the guest to start"
    )
    parser.add_argument("--append", default="", help="extra kernel command line")
    accel = parser.add_mutually_exclusive_group()
    accel.add_argument("--kvm", dest="kvm", action="store_true", default=None, help="force KVM")
    accel.add_argument("--tcg", dest="kvm", action="store_false", help="force TCG (no KVM)")
    parser.add_argument(
        "--kernel-log", action="store_true", help="show the kernel console (to debug a panic)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return parser


def _guest_root(args: argparse.Namespace) -> GuestRoot | None:
    try:
        if args.root is not None:
            return GuestRoot.open(args.root, args.arch)
        if machine_name(args.arch) != platform.machine():
            raise VmError(
                f"--arch {args.arch} needs --root DIR: a root file system of that architecture "
                "with pytest-lbr installed (pytest-lbr's ci/qemu/arm64-root builds an arm64 one)"
            )
    except RootError as exc:
        raise VmError(str(exc)) from None
    return None


def _kernels(args: argparse.Namespace, guest_root: GuestRoot | None) -> list[tuple[Path, str]]:
    """(image, label) per kernel asked for; a guest root boots its own kernels."""
    if guest_root is None:
        return [(resolve_kernel(spec), kernel_label(spec)) for spec in args.kernel or ["6.12"]]
    arch = args.arch or guest_root.machine
    kernels = []
    for spec in args.kernel or [None]:
        try:
            image = guest_root.kernel(spec)
        except RootError as exc:
            raise VmError(str(exc)) from None
        if spec is None or re.fullmatch(r"\d+\.\d+", spec):
            series = spec or ".".join(re.findall(r"\d+", image.name)[:2])  # vmlinuz-6.1.0-28-arm64
            label = f"{arch}-{series}"
        else:
            label = kernel_label(spec)
        kernels.append((image, label))
    return kernels


def _plans(args: argparse.Namespace, pytest_args: list[str]) -> list[VmPlan]:
    guest_root = _guest_root(args)
    vng = find_tools(guest_root)
    root = (args.results or Path.cwd() / DEFAULT_RESULTS).resolve()
    if args.shard is not None:
        pytest_args = [f"--lbr-shard={args.shard}", *pytest_args]
    env, unset = guest_environment(os.environ, getattr(args, "env", []))
    for name in unset:
        say(f"--env {name}: not set here, so not set in the guest (--env {name}=VALUE sets it)")
    plans = []
    for kernel, label in _kernels(args, guest_root):
        wanted = root / label
        results = wanted if args.dry_run else claim_results_dir(wanted)
        plans.append(
            build_command(
                kernel,
                results,
                pytest_args,
                label=label,
                execute=args.execute,
                memory=args.memory,
                cpus=args.cpus,
                kvm=args.kvm,
                append=args.append,
                rw=[p.resolve() for p in args.rw],
                kernel_log=args.kernel_log,
                strict=args.strict,
                vng=vng,
                root=guest_root,
                env=env,
            )
        )
    return plans


def _run_one(plan: VmPlan, args: argparse.Namespace, prefix: str | None) -> GuestResult:
    say(f"{plan.label}: {plan.kernel}; {plan.accel}; {plan.lbr}; results in {plan.results}")
    if plan.env:
        say(f"{plan.label}: environment from here: {', '.join(sorted(plan.env))}")
    try:
        status = run_vm(plan, timeout=args.timeout, boot_timeout=args.boot_timeout, prefix=prefix)
    except VmError as exc:
        say(f"error: {exc}")
        failed = GuestResult(plan.label, EXIT_NO_GUEST, plan.results, error=str(exc))
        if isinstance(exc, GuestError):
            write_guest_record(failed, str(plan.kernel), exc.end, exc.why, exc.console)
        else:
            write_guest_record(failed, str(plan.kernel), "not_started", str(exc).splitlines()[0])
        return failed
    records = None if args.execute is not None else read_guest_results(plan.results)
    result = GuestResult(plan.label, status, plan.results, records)
    splats = unreported_splats(plan.results) if getattr(args, "check_splats", True) else []
    for splat in splats:
        say(f"{plan.label}: kernel splat no test reported:\n  " + "\n  ".join(splat.lines))
    result.splats = splats
    if splats:
        result.note = f"kernel splat no test reported: {splats[0].summary}"
        if status in (0, 5):  # a worse status already says the guest failed
            result.status = 1
    write_guest_record(result, str(plan.kernel), "reported")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`pytest-lbr vm ...` (and, inside the VM, `python -m pytest_lbr.vm guest ...`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["guest"]:
        return guest_cli(argv[1:])
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    if args.execute is not None and pytest_args:
        say("error: --exec runs a command instead of pytest: drop the pytest arguments after --")
        return 4
    try:  # the guests cannot write the caller's paths: the reports are written here
        pytest_args, coverage = split_coverage_args(pytest_args)
    except ValueError as exc:
        say(f"error: --lbr-cov-report: {exc} (FORMAT:PATH)")
        return 4
    try:
        plans = _plans(args, pytest_args)
    except VmError as exc:
        say(f"error: {exc}")
        if not args.dry_run:
            _record_not_started(args, str(exc))
        return EXIT_CANNOT_TEST if args.bisect else EXIT_NO_GUEST
    if args.dry_run:
        for plan in plans:
            print(shlex.join(plan.command))
        return 0
    args.check_splats = not _splats_off(pytest_args)
    busiest = max(plan.host_cpus for plan in plans)
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // max(1, busiest))
    prefixed = len(plans) > 1 and jobs > 1
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            try:
                results = list(
                    pool.map(
                        lambda p: _run_one(p, args, f"[{p.label}] " if prefixed else None), plans
                    )
                )
            except KeyboardInterrupt:
                stop_guests()  # before the pool waits for its threads, which wait for guests
                raise
    except KeyboardInterrupt:
        say("interrupted: guests stopped")
        return 130
    for r in results:
        say(r.line())
    runs = {r.label: r.records for r in results}
    if coverage.enabled:
        for line in coverage.write(runs, Path.cwd()):
            say(line)
    root = plans[0].results.parent
    if args.execute is None and root.is_dir():  # the results directory this run claimed
        say(f"summary: {write_summary(root, results, coverage.summary(runs))}")
    status = worst_status([r.status for r in results])
    if args.bisect:
        status = bisect_status(status)
    if len(results) > 1:
        say(f"exit {status} (the worst of {', '.join(f'{r.label}: {r.status}' for r in results)})")
    return status


def _record_not_started(args: argparse.Namespace, error: str) -> None:
    """A run that could not start its guests still leaves each kernel a `guest` record
    saying why (`pytest-lbr bisect` reads it). A guest root names its kernels only
    once opened: there the message on stderr is all."""
    if args.root is not None:
        return
    root = (args.results or Path.cwd() / DEFAULT_RESULTS).resolve()
    for spec in args.kernel or ["6.12"]:
        label = kernel_label(spec)
        try:
            results = claim_results_dir(root / label)
        except (OSError, VmError):
            continue
        for name in (STARTED, STATUS):
            (results / name).unlink(missing_ok=True)
        failed = GuestResult(label, EXIT_NO_GUEST, results, error=error)
        write_guest_record(failed, "", "not_started", error.splitlines()[0])


def _splats_off(pytest_args: Sequence[str]) -> bool:
    for i, arg in enumerate(pytest_args):
        if arg == "--lbr-kernel-splats=off" or (
            arg == "--lbr-kernel-splats" and pytest_args[i + 1 : i + 2] == ["off"]
        ):
            return True
    return False
