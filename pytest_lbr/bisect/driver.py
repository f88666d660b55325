"""`pytest-lbr bisect`: find the commit that changed a golden trace, with `git bisect run`.

Two histories:

* a BPF program's (the repository of the current directory): at each commit an
  optional build command (`--build "make -C bpf"`), then the golden tests, either
  here (`--here`: this machine or guest is the test kernel) or in `pytest-lbr vm`
  guests (`--kernel 6.12`, repeatable; the default);
* a kernel's (`--kernel-src DIR`): at each commit the kernel is built with
  `vng --build` plus the config items tracing needs, and booted with
  `pytest-lbr vm --kernel DIR --bisect` to run the tests of the current directory.

Each step (`pytest_lbr.bisect.step`) answers good, bad or skip; this module checks
the request, drives `git bisect start/run/reset` (the user's checkout comes back at
the end, on Ctrl-C too) and sums up: the first bad commit, the golden diff that made
it bad, and the commits that could not be tested, with why.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal, TextIO

from pytest_lbr.bisect.step import (
    PLAN_FILE,
    BisectPlan,
    StepResult,
    build_command,
    read_steps,
    run_step,
    test_command,
)
from pytest_lbr.exit_codes import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_USAGE
from pytest_lbr.progress import progress, set_progress

__all__ = [
    "BisectError",
    "BisectOutcome",
    "build_parser",
    "main",
    "make_plan",
    "run_bisect",
]

#: The state directory, inside the bisected repository's git directory: never in the
#: way of a checkout, and gone with the repository.
STATE_DIR = "pytest-lbr-bisect"

_FIRST_BAD = re.compile(r"^# first bad commit: \[([0-9a-f]+)\]", re.M)
_POSSIBLE = re.compile(r"^# possible first bad commit: \[([0-9a-f]+)\]", re.M)
_LEFT = re.compile(r"^Bisecting: (.*)$")


class BisectError(Exception):
    """A request `pytest-lbr bisect` cannot start: one line, exit 2."""


# -- git --------------------------------------------------------------------------------


def _git(repo: str | Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if check and out.returncode:
        raise BisectError(f"git {' '.join(args)} failed in {repo}: {_first(out.stderr)}")
    return out.stdout.rstrip()  # not strip(): `status --porcelain` lines start with a space


def _first(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _toplevel(where: Path) -> Path:
    if not where.is_dir():
        raise BisectError(f"{where} is not a directory")
    out = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise BisectError(f"{where} is not in a git repository")
    return Path(out.stdout.strip())


def _commit(repo: Path, rev: str, role: str) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise BisectError(f"{role} revision {rev!r} is not a commit in {repo}")
    return out.stdout.strip()


def _check_repo(repo: Path, good: str, bad: str) -> tuple[str, str]:
    """The good and bad commits; BisectError when git bisect could not start cleanly."""
    if Path(repo, _git(repo, "rev-parse", "--git-path", "BISECT_START")).exists():
        raise BisectError(
            f"a git bisect is already in progress in {repo} (`git bisect reset` ends it)"
        )
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        files = ", ".join(line[3:] for line in dirty.splitlines()[:5])
        raise BisectError(f"{repo} has uncommitted changes ({files}): commit or stash them first")
    good_sha, bad_sha = _commit(repo, good, "good"), _commit(repo, bad, "bad")
    if good_sha == bad_sha:
        raise BisectError(f"good ({good}) and bad ({bad}) are the same commit")
    ancestor = subprocess.run(
        ["git", "merge-base", "--is-ancestor", good_sha, bad_sha], cwd=repo, check=False
    )
    if ancestor.returncode:
        swapped = " (swapped?)" if _is_ancestor(repo, bad_sha, good_sha) else ""
        raise BisectError(f"good ({good}) is not an ancestor of bad ({bad}){swapped}")
    return good_sha, bad_sha


def _is_ancestor(repo: Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=repo).returncode == 0


# -- the request ------------------------------------------------------------------------


USAGE = """pytest-lbr bisect --good REV [--bad REV] [--build CMD] [--here | --kernel K...] -- PYTEST ARGS
       pytest-lbr bisect --kernel-src DIR --good REV [--bad REV] [--config FILE]
                         [--configitem X=y]... -- PYTEST ARGS
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BisectError(message)


def build_parser() -> argparse.ArgumentParser:
    """The `pytest-lbr bisect` options."""
    parser = _Parser(
        prog="pytest-lbr bisect",
        usage=USAGE,
        description="Find the first commit whose golden traces differ, with git bisect: "
        "a BPF program's history (the repository of this directory) or a kernel's "
        "(--kernel-src). Each commit is built, then the golden tests decide: match good, "
        "mismatch bad; a commit that cannot be tested (build failure, no boot, panic, "
        "tracing impossible, no test) is skipped. Exit status: 0 first bad commit found, "
        "1 not found, 2 usage error, 130 interrupted.",
    )
    parser.add_argument("--good", required=True, metavar="REV", help="a commit that passes")
    parser.add_argument("--bad", default="HEAD", metavar="REV", help="a commit that fails (HEAD)")
    parser.add_argument(
        "--build", metavar="CMD", help="program history: shell command run before the tests"
    )
    parser.add_argument(
        "--here",
        action="store_true",
        help="program history: run the tests in this machine (e.g. CI already in a guest)",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="K",
        help="program history: run the tests in a pytest-lbr vm guest of K (6.1, 6.12, an "
        "image; repeatable; default 6.12)",
    )
    parser.add_argument(
        "--kernel-src", type=Path, metavar="DIR", help="kernel history: the kernel's git tree"
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="kernel .config to start from")
    parser.add_argument(
        "--configitem",
        action="append",
        default=[],
        metavar="X=y",
        help="extra kernel config item (the tracing ones are always added)",
    )
    parser.add_argument(
        "--panic-is-bad", action="store_true", help="a guest kernel panic counts as bad, not skip"
    )
    parser.add_argument(
        "--timeout", type=float, default=1500.0, help="limit for each step's tests, seconds"
    )
    parser.add_argument(
        "--boot-timeout", type=float, default=300.0, help="limit for a guest to start, seconds"
    )
    parser.add_argument(
        "--logs",
        type=Path,
        metavar="DIR",
        help=f"where each step's output goes (default: .git/{STATE_DIR} of the bisected repo)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return parser


def make_plan(args: argparse.Namespace, cwd: Path) -> tuple[BisectPlan, str, str]:
    """The plan and the good and bad commits; BisectError for what cannot work."""
    if not args.pytest_args:
        raise BisectError("no pytest arguments after --: which golden tests decide?")
    kernel_history = args.kernel_src is not None
    if kernel_history:
        for given, what in (
            (args.here, "--here"),
            (args.kernel, "--kernel"),
            (args.build, "--build"),
        ):
            if given:
                raise BisectError(
                    f"{what} is for a program's history; with --kernel-src each step builds "
                    "and boots that kernel"
                )
    else:
        if args.config or args.configitem:
            raise BisectError("--config and --configitem need --kernel-src (a kernel history)")
        if args.here and args.kernel:
            raise BisectError("--here runs the tests in this machine, --kernel in guests: pick one")
        if args.here and args.panic_is_bad:
            raise BisectError("--panic-is-bad needs guests (--kernel or --kernel-src), not --here")
    if args.config is not None and not args.config.is_file():
        raise BisectError(f"kernel config {args.config} does not exist")
    repo = _toplevel(args.kernel_src.resolve() if kernel_history else cwd)
    good, bad = _check_repo(repo, args.good, args.bad)
    mode: Literal["here", "vm", "kernel"] = (
        "kernel" if kernel_history else "here" if args.here else "vm"
    )
    kernels = args.kernel or ([] if mode != "vm" else ["6.12"])
    if mode != "here":
        from pytest_lbr.vm import VmError, find_tools, resolve_kernel

        try:
            find_tools()
            kernels = [str(resolve_kernel(k)) for k in kernels]
        except VmError as exc:
            raise BisectError(str(exc)) from None
    git_dir = Path(repo, _git(repo, "rev-parse", "--git-dir"))
    state = (args.logs or git_dir / STATE_DIR).resolve()
    # The log directory is emptied at the start: never a directory that is not ours.
    if state.exists() and not (state / PLAN_FILE).exists() and any(state.iterdir()):
        raise BisectError(f"--logs {state} is not empty and holds no earlier bisection's logs")
    plan = BisectPlan(
        mode=mode,
        repo=str(repo),
        cwd=str(cwd),
        state=str(state),
        pytest_args=list(args.pytest_args),
        build=args.build,
        kernels=kernels,
        kernel_src=str(repo) if kernel_history else None,
        config=str(args.config.resolve()) if args.config else None,
        config_items=list(args.configitem),
        panic_is_bad=args.panic_is_bad,
        timeout=args.timeout,
        boot_timeout=args.boot_timeout,
    )
    return plan, good, bad


def _step_command(plan: BisectPlan) -> list[str]:
    # -P: the bisected checkout (cwd of `git bisect run`) must not shadow pytest_lbr.
    return [sys.executable, "-P", "-m", "pytest_lbr.bisect.step", plan.state]


def dry_run_lines(plan: BisectPlan, good: str, bad: str) -> list[str]:
    """The commands a bisection runs, as `--dry-run` prints them."""
    step_dir = Path(plan.state, "N-COMMIT")
    build = build_command(plan)
    where = plan.kernel_src if plan.mode == "kernel" else plan.cwd
    lines = [f"git -C {plan.repo} bisect start {bad} {good}"]
    lines.append(f"git -C {plan.repo} bisect run {shlex.join(_step_command(plan))}")
    if build is not None:
        lines.append(f"  (step) cd {where} && {shlex.join(build)}")
    lines.append(f"  (step) cd {plan.cwd} && {shlex.join(test_command(plan, step_dir))}")
    lines.append(f"git -C {plan.repo} bisect reset")
    return lines


# -- running it -------------------------------------------------------------------------


@dataclass
class BisectOutcome:
    """How a bisection ended: the first bad commit, or the commits it could be, and why."""

    repo: str
    state: str
    steps: list[StepResult] = field(default_factory=list)
    #: The first bad commit (None when git could not narrow it to one).
    first_bad: str | None = None
    #: When only skipped commits are left: the commits the first bad one could be.
    candidates: list[str] = field(default_factory=list)
    #: Why the bisection stopped without an answer (git's error, an interrupted run).
    error: str = ""
    interrupted: bool = False
    #: The checkout could not be restored: what to run.
    reset_error: str = ""
    subjects: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> int:
        """`pytest-lbr bisect`'s exit status."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FOUND if self.first_bad else EXIT_NOT_FOUND

    def _name(self, sha: str) -> str:
        subject = self.subjects.get(sha) or next(
            (s.subject for s in self.steps if s.commit == sha), ""
        )
        return f"{sha[:12]} {subject}".rstrip()

    def format(self) -> str:
        """The end summary."""
        out: list[str] = []
        if self.first_bad:
            out.append(
                f"first bad commit: {self.first_bad} {self.subjects.get(self.first_bad, '')}"
            )
        elif self.candidates:
            out.append(
                "no single first bad commit: only commits that could not be tested are left; "
                "it is one of:"
            )
            tested = {s.commit: s for s in self.steps}
            for sha in self.candidates:
                why = f" (skipped: {tested[sha].reason})" if sha in tested else " (the bad end)"
                out.append(f"  {self._name(sha)}{why}")
        elif self.interrupted:
            out.append("interrupted: no first bad commit")
        else:
            out.append(f"no first bad commit: {self.error or 'the bisection stopped'}")
        if self.steps:
            out.append("steps:")
            out += [
                f"  {s.line()}" + (" (the bad end, tested for its diff)" if s.extra else "")
                for s in self.steps
            ]
        skipped = [s for s in self.steps if s.verdict == "skip"]
        if skipped:
            out.append("skipped (could not test):")
            out += [f"  {self._name(s.commit)}: {s.reason}" for s in skipped]
        if self.first_bad:
            bad = [s for s in self.steps if s.commit == self.first_bad and s.verdict == "bad"]
            if bad and bad[-1].golden:
                for test, diff in bad[-1].golden:
                    out.append(f"golden diff that made {self.first_bad[:12]} bad ({test}):")
                    out += [f"  {line}" for line in diff.splitlines()]
            elif bad:
                out.append(f"no golden diff: {self.first_bad[:12]} is bad because {bad[-1].reason}")
            else:
                out.append(f"no golden diff: {self.first_bad[:12]} was not tested")
        out.append(f"logs: {self.state}")
        if self.reset_error:
            out.append(f"could not restore the checkout: {self.reset_error}")
        return "\n".join(out)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop `git bisect run` and its step: SIGINT to their process group, so the step
    stops its build, test or guest (a guest runs in its own session: only the
    `pytest-lbr vm` in the group can stop it). SIGINT again every 2 s reaches what
    was starting at the first one; SIGKILL after 20 s. Returns when the group is
    gone, so the checkout is not restored under a build still running."""
    deadline = time.monotonic() + 20.0
    while True:
        try:
            os.killpg(proc.pid, signal.SIGINT if time.monotonic() < deadline else signal.SIGKILL)
        except ProcessLookupError:
            break
        for _ in range(20):
            proc.poll()  # reap git; the group lives on while its step does
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            continue
        break
    proc.wait()


def _run_git_bisect(plan: BisectPlan, log: TextIO) -> None:
    """`git bisect run` the step; its chatter into `log`, its progress forwarded."""
    proc = subprocess.Popen(
        ["git", "bisect", "run", *_step_command(plan)],
        cwd=plan.repo,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        # Its own process group: Ctrl-C reaches the driver, which stops git and the
        # step in order (the step's guest first) and then restores the checkout.
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            left = _LEFT.match(line)
            if left:
                progress(left.group(1))
        proc.wait()
    except BaseException:
        _stop(proc)
        raise


def run_bisect(plan: BisectPlan, good: str, bad: str) -> BisectOutcome:
    """Bisect between `good` and `bad` as `plan` says; the checkout is restored at the end."""
    state = Path(plan.state)
    if state.exists():
        shutil.rmtree(state)  # the previous bisection's steps are not this one's
    state.mkdir(parents=True)
    plan.save()
    repo = plan.repo
    outcome = BisectOutcome(repo, plan.state)
    count = _git(repo, "rev-list", "--count", f"{good}..{bad}")
    progress(
        f"bisecting {count} commits of {repo}: good {good[:12]}, bad {bad[:12]}; "
        f"tests {'here' if plan.mode == 'here' else 'in guests'}; logs in {plan.state}"
    )
    try:
        started = subprocess.run(
            ["git", "bisect", "start", bad, good],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode:
            outcome.error = f"git bisect start: {_first(started.stderr or started.stdout)}"
            return outcome
        left = _LEFT.match(started.stdout)
        if left:
            progress(left.group(1))
        if not _FIRST_BAD.search(_git(repo, "bisect", "log")):
            with open(state / "git-bisect.log", "w") as log:
                log.write(started.stdout)
                _run_git_bisect(plan, log)
        _conclude(plan, outcome)
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        outcome.steps = read_steps(state)
        _restore(outcome)
    for sha in {*outcome.candidates, *([outcome.first_bad] if outcome.first_bad else [])}:
        outcome.subjects[sha] = _git(repo, "log", "-1", "--format=%s", sha, check=False)
    return outcome


def _conclude(plan: BisectPlan, outcome: BisectOutcome) -> None:
    """Read git's answer; test the first bad commit if git never did (it is the bad
    end), so the summary has its golden diff."""
    log = _git(plan.repo, "bisect", "log")
    found = _FIRST_BAD.search(log)
    if found:
        outcome.first_bad = _git(plan.repo, "rev-parse", found.group(1))
    else:
        outcome.candidates = [_git(plan.repo, "rev-parse", s) for s in _POSSIBLE.findall(log)]
        if not outcome.candidates:
            outcome.error = "git bisect run stopped: see " + str(Path(plan.state, "git-bisect.log"))
        return
    if any(s.commit == outcome.first_bad for s in read_steps(Path(plan.state))):
        return
    progress(f"{outcome.first_bad[:12]} was never tested (the bad end): testing it for its diff")
    _git(plan.repo, "checkout", "-q", outcome.first_bad)
    run_step(plan, extra=True)


def _restore(outcome: BisectOutcome) -> None:
    reset = subprocess.run(
        ["git", "bisect", "reset"], cwd=outcome.repo, capture_output=True, text=True, check=False
    )
    if reset.returncode:
        outcome.reset_error = (
            f"{_first(reset.stderr)} (in {outcome.repo}: fix that, then `git bisect reset`)"
        )


# -- command line -----------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """`pytest-lbr bisect ...`."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    previous = set_progress(lambda m: print(f"pytest-lbr bisect: {m}", file=err, flush=True))

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, interrupt)  # `kill` restores the checkout too
    pytest_args: list[str] = []
    if "--" in argv:  # everything after it is pytest's, options included
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    try:
        args = build_parser().parse_args(argv)
        args.pytest_args = pytest_args
        plan, good, bad = make_plan(args, Path.cwd())
        if args.dry_run:
            print("\n".join(dry_run_lines(plan, good, bad)), file=out)
            return EXIT_FOUND
        outcome = run_bisect(plan, good, bad)
    except BisectError as exc:
        print(f"pytest-lbr bisect: error: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted", file=err)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, old_term)
        set_progress(previous)
    print(outcome.format(), file=out, flush=True)
    return outcome.status


if __name__ == "__main__":
    sys.exit(main())
