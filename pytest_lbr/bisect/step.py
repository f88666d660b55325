"""One step of `pytest-lbr bisect`: build the checked-out commit, run the golden tests, and
turn what happened into `git bisect run`'s verdict.

    good (0)  the tests passed: every golden trace matched
    bad (1)   a test failed (a golden mismatch, or a kernel panic under --panic-is-bad)
    skip (125) this commit could not be tested: the build failed, the guest did not boot
              or panicked, tracing was impossible, no test was collected or none ran

`git bisect run` starts `python -m pytest_lbr.bisect.step STATE_DIR` at each commit; the
step reads the plan `pytest-lbr bisect` wrote there, appends its `StepResult` to
`steps.jsonl` (the driver's end summary reads them back) and exits with the verdict.
Build and test output go to the step's own directory; only progress lines reach stderr.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from pytest_lbr.exit_codes import EXIT_BAD, EXIT_CANNOT_TEST, EXIT_GOOD
from pytest_lbr.guest_mode import RESULTS_FILE
from pytest_lbr.progress import progress, set_progress
from pytest_lbr.results import Results, guest_record, read_results

__all__ = [
    "PLAN_FILE",
    "RESULTS_FILE",
    "STEPS_FILE",
    "TRACING_CONFIG",
    "BisectPlan",
    "StepResult",
    "build_command",
    "golden_diffs",
    "main",
    "pytest_verdict",
    "read_steps",
    "read_session",
    "run_step",
    "test_command",
]

Verdict = Literal["good", "bad", "skip"]
_EXIT_OF: dict[Verdict, int] = {"good": EXIT_GOOD, "bad": EXIT_BAD, "skip": EXIT_CANNOT_TEST}

#: What pytest-lbr needs from a kernel it boots: BPF with BTF, ftrace with the function
#: graph tracer (the graph backend), kprobes (and kprobe.multi: FPROBE), BPF events.
TRACING_CONFIG = (
    "CONFIG_BPF_SYSCALL=y",
    "CONFIG_BPF_JIT=y",
    "CONFIG_DEBUG_INFO_BTF=y",
    "CONFIG_FTRACE=y",
    "CONFIG_FUNCTION_TRACER=y",
    "CONFIG_FUNCTION_GRAPH_TRACER=y",
    "CONFIG_DYNAMIC_FTRACE=y",
    "CONFIG_KPROBES=y",
    "CONFIG_KPROBE_EVENTS=y",
    "CONFIG_BPF_EVENTS=y",
    "CONFIG_FPROBE=y",
)

PLAN_FILE = "plan.json"
STEPS_FILE = "steps.jsonl"
_TIMED_OUT = 124  # as timeout(1) says it


@dataclass
class BisectPlan:
    """What every step does; written as JSON by `pytest-lbr bisect` for the steps.

    `mode`: "here" (tests run in this machine), "vm" (a program's history, tests in
    `pytest-lbr vm` guests of `kernels`) or "kernel" (the kernel in `kernel_src` is
    built with vng and booted). `cwd`: where builds and tests run (the caller's
    directory). `state`: where the plan, the step records and their logs live.
    """

    mode: Literal["here", "vm", "kernel"]
    repo: str
    cwd: str
    state: str
    pytest_args: list[str]
    build: str | None = None
    kernels: list[str] = field(default_factory=list)
    kernel_src: str | None = None
    config: str | None = None
    config_items: list[str] = field(default_factory=list)
    panic_is_bad: bool = False
    timeout: float = 1500.0
    boot_timeout: float = 300.0

    def save(self) -> None:
        """Write the plan into its state directory."""
        Path(self.state, PLAN_FILE).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, state: Path) -> BisectPlan:
        """The plan saved in `state`."""
        return cls(**json.loads((state / PLAN_FILE).read_text()))


@dataclass
class StepResult:
    """One tested commit: its verdict, why, and (when bad) the golden diffs that decided."""

    number: int
    commit: str
    subject: str
    verdict: Verdict
    reason: str
    log_dir: str
    #: The exit status `git bisect run` got (0, 1 or 125).
    status: int = 0
    #: (test, the failure's golden diff) per golden mismatch.
    golden: list[tuple[str, str]] = field(default_factory=list)
    #: Run by the driver itself, not by git (the bad end, for its diff).
    extra: bool = False

    def line(self) -> str:
        """`3 1a2b3c4d skip: build failed (exit 2): ...`"""
        return f"{self.number:>2} {self.commit[:12]} {self.verdict}: {self.reason}"


def read_steps(state: Path) -> list[StepResult]:
    """Every step recorded so far, in the order they ran."""
    try:
        text = (state / STEPS_FILE).read_text()
    except OSError:
        return []
    steps = []
    for line in text.splitlines():
        data = json.loads(line)
        data["golden"] = [tuple(g) for g in data.get("golden", [])]
        steps.append(StepResult(**data))
    return steps


# -- reading a test session ----------------------------------------------------------


def read_session(path: Path) -> Results | None:
    """The results file a pytest session wrote, or None when there is none (pytest never
    got as far as writing it: a collection error, a guest that did not boot)."""
    try:
        return read_results(path)
    except OSError:
        return None


def golden_diffs(results: Results) -> list[tuple[str, str]]:
    """(test, diff) for each golden mismatch: the golden file and its unified diff."""
    return [(nodeid, f"{g.file}\n{g.diff.rstrip()}") for nodeid, g in results.mismatches()]


def pytest_verdict(status: int, results: Results | None, output: str) -> tuple[Verdict, str]:
    """Verdict and reason for a pytest session's exit status and its results records.

    The verdict comes from the status and the records alone; `output` (pytest's own
    terminal text) only adds pytest's first ERROR line to a "cannot test" reason."""
    tests = results.tests if results is not None else []
    if status == 0:
        passed = sum(t.outcome == "passed" for t in tests)
        skipped = [t for t in tests if t.outcome == "skipped"]
        if tests and not passed and skipped:
            return "skip", f"no test ran ({len(skipped)} skipped: {skipped[0].reason})"
        count = f" ({passed} passed)" if results is not None else ""
        return "good", f"tests passed, golden traces match{count}"
    if status == 1:
        if results is not None:
            why = _failure(results)
            if why:
                return "bad", why
        return "bad", "a test failed"
    if status == EXIT_CANNOT_TEST:
        session = results.session if results is not None else None
        if session is not None and not session.tracing and session.reason:
            return "skip", f"tracing impossible: {session.reason}"
        return "skip", "tracing impossible"
    meaning = {
        2: "pytest was interrupted (a collection error?)",
        3: "pytest internal error",
        4: "pytest usage error",
        5: "no test collected",
        _TIMED_OUT: "the tests ran past --timeout",
    }
    why = meaning.get(status, f"pytest exited {status}")
    error = next((line.strip() for line in output.splitlines() if line.startswith("ERROR")), "")
    return "skip", (f"{why}: {error[:200]}" if error and status != 5 else why)


def _failure(results: Results) -> str:
    """Why a session with failures is bad: its golden mismatches first, then the first
    other failure, then a kernel splat no test reported ("" if the records name none)."""
    mismatched = list(dict.fromkeys(nodeid for nodeid, _ in results.mismatches()))
    if mismatched:
        return "golden mismatch in " + ", ".join(mismatched)
    failed = next((t for t in results.tests if t.outcome in ("failed", "error")), None)
    if failed is not None:
        return f"{failed.nodeid} failed, not a golden mismatch: {failed.reason[:160]}"
    if results.splats:
        return f"kernel splat no test reported: {results.splats[0].title}"
    return ""


# -- the commands ---------------------------------------------------------------------


def _script(name: str) -> str:
    """An installed console script beside this Python (vng, pytest-lbr)."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def build_command(plan: BisectPlan) -> list[str] | None:
    """The step's build command (None: nothing to build)."""
    if plan.mode == "kernel":
        cmd = [_script("vng"), "--build"]
        if plan.config:
            cmd += ["--config", plan.config]
        for item in (*TRACING_CONFIG, *plan.config_items):
            cmd += ["--configitem", item]
        return cmd
    return ["sh", "-c", plan.build] if plan.build else None


def _pytest_args(plan: BisectPlan) -> list[str]:
    # Golden verdicts need tracing: on, and required (impossible tracing -> 125, not a pass).
    wanted = [["--lbr"], ["--lbr-require"]]
    if plan.mode == "here":
        # --here means "this machine is the test kernel": kernel tests run here, and
        # no .pytest_cache lands in the checkout being bisected.
        wanted += [["--lbr-run-kernel-tests"], ["-p", "no:cacheprovider"]]
    added = [arg for option in wanted if option[-1] not in plan.pytest_args for arg in option]
    return added + plan.pytest_args


def test_command(plan: BisectPlan, step_dir: Path) -> list[str]:
    """The command that runs the golden tests of one step."""
    args = _pytest_args(plan)
    if plan.mode == "here":
        # -P: like the `pytest` command, the checkout is not put on sys.path.
        results = f"--lbr-results={step_dir / RESULTS_FILE}"
        return [sys.executable, "-P", "-m", "pytest", *args, results]
    kernels = [plan.kernel_src] if plan.mode == "kernel" else plan.kernels
    cmd = [_script("pytest-lbr"), "vm"]
    for kernel in kernels:
        cmd += ["--kernel", str(kernel)]
    # --kernel-log: the kernel console lands in console.log, where a panic is seen.
    cmd += ["--bisect", "--kernel-log", "--results", str(step_dir / "results")]
    cmd += ["--timeout", f"{plan.timeout:g}", "--boot-timeout", f"{plan.boot_timeout:g}"]
    # --no-strict: a kernel test that skips is "cannot test" here, not a failure (bad);
    # --lbr-require already turns tracing that cannot run into 125.
    return [*cmd, "--no-strict", "--", *args]


def _run(cmd: list[str], cwd: str, log: Path, timeout: float | None = None) -> tuple[int, str]:
    """Run `cmd` with its output into `log`; (exit status, output)."""
    env = dict(os.environ)
    # vng finds its helpers (virtme-configkernel) and the guest its tools on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    header = f"$ (cd {shlex.quote(cwd)} && {shlex.join(cmd)})\n".encode()
    with open(log, "wb") as out:
        out.write(header)
        out.flush()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:  # the command does not exist
            out.write(f"{exc}\n".encode())
            status = 127
        else:
            status = _wait(proc, timeout, out)
    return status, log.read_bytes()[len(header) :].decode(errors="replace")


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, out: BinaryIO) -> int:
    """The exit status of `proc`; a run past `timeout` is killed."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        out.write(f"\n(killed after {timeout:g} s)\n".encode())
        return _TIMED_OUT
    except KeyboardInterrupt:
        # The child got the same Ctrl-C: let it stop what it started (a guest).
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _error_line(output: str) -> str:
    """The compiler's or make's first error line, else the last line of the output."""
    for line in output.splitlines():
        if re.search(r"\berror\b|\*\*\*", line, re.I):
            return line.strip()[:200]
    return _last_line(output)


def _guest_verdict(plan: BisectPlan, results: Path) -> tuple[Verdict, str]:
    """Why `pytest-lbr vm --bisect` said 125 (or 1 without a test failing), per kernel,
    from the `guest` record the runner wrote for each (docs/results.md)."""
    reasons: list[str] = []
    verdict: Verdict = "skip"
    guests = sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []
    for guest in guests:
        where = f"{guest.name}: " if len(guests) > 1 else ""
        record = guest_record(guest)
        if record is None:
            reasons.append(f"{where}pytest-lbr vm left no record of this guest")
        elif record.status is not None:
            if record.status in (0, 1):
                continue  # this guest gave a verdict; another one did not
            console = guest / "console.log"
            # pytest's own first ERROR line, only to say more in the reason.
            output = console.read_text(errors="replace") if console.exists() else ""
            _, why = pytest_verdict(record.status, read_session(guest / RESULTS_FILE), output)
            reasons.append(where + why)
        elif record.panic:
            reasons.append(f"{where}kernel panicked ({record.panic})")
            if plan.panic_is_bad:
                verdict = "bad"
        else:
            what = {
                "no_boot": "guest did not boot",
                "not_started": "pytest-lbr vm could not start the guest",
                "hang": "guest did not finish (hang)",
            }.get(record.end, "guest did not finish (hang or crash)")
            if record.splats:
                what += f": {record.splats[0].title}"
            reasons.append(f"{where}{what}" + (f" [{record.error[:200]}]" if record.error else ""))
    return verdict, "; ".join(reasons) or "no guest ran"


def _unreported_splat(results: Path) -> str:
    """The first kernel splat a guest's runner found that no test reported ("" if none)."""
    for guest in sorted(results.glob("*/")):
        record = guest_record(guest)
        if record is not None and record.splats:
            return f"kernel splat no test reported: {record.splats[0].title}"
    return ""


def _test(plan: BisectPlan, step_dir: Path) -> tuple[Verdict, str, list[tuple[str, str]]]:
    status, output = _run(
        test_command(plan, step_dir),
        plan.cwd,
        step_dir / "test.log",
        # Here the whole run is ours to limit; a VM runner enforces --timeout itself.
        timeout=plan.timeout if plan.mode == "here" else None,
    )
    if plan.mode == "here":
        session = read_session(step_dir / RESULTS_FILE)
        verdict, reason = pytest_verdict(status, session, output)
        return verdict, reason, golden_diffs(session) if session else []
    results = step_dir / "results"
    sessions = [read_session(p) for p in sorted(results.glob(f"*/{RESULTS_FILE}"))]
    found = [s for s in sessions if s is not None]
    diffs = [d for s in found for d in golden_diffs(s)]
    if status == EXIT_GOOD:
        passed = sum(s.count("passed") for s in found)
        skipped = sum(s.count("skipped") for s in found)
        if found and not passed and skipped:
            return "skip", f"no test ran ({skipped} skipped)", diffs
        return "good", f"tests passed, golden traces match ({passed} passed)", diffs
    if status == EXIT_BAD:
        why = next((w for w in map(_failure, found) if w), "") or _unreported_splat(results)
        return "bad", why or "the guest run failed", diffs
    verdict, reason = _guest_verdict(plan, results)
    return verdict, reason, diffs


def _commit(repo: str) -> tuple[str, str]:
    out = subprocess.run(
        ["git", "log", "-1", "--format=%H%n%s"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return out[0], out[1] if len(out) > 1 else ""


def _restore_tracked_files(repo: str, step_dir: Path) -> None:
    """Undo what the build changed in tracked files, so git can check out the next
    commit (the tree was clean when the bisection started)."""
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if dirty.strip():
        with open(step_dir / "build.log", "a") as log:
            log.write(f"\nrestoring tracked files the step changed:\n{dirty}")
        subprocess.run(["git", "reset", "-q", "--hard"], cwd=repo, check=False)


def run_step(plan: BisectPlan, *, extra: bool = False) -> StepResult:
    """Build and test the commit checked out in `plan.repo`; record and return the result."""
    state = Path(plan.state)
    number = len(read_steps(state)) + 1
    commit, subject = _commit(plan.repo)
    step_dir = state / f"{number}-{commit[:12]}"
    step_dir.mkdir(parents=True, exist_ok=True)
    progress(f"step {number}: {commit[:12]} {subject}")
    golden: list[tuple[str, str]] = []
    try:
        build = build_command(plan)
        status = 0
        output = ""
        if build is not None:
            where = plan.kernel_src if plan.mode == "kernel" else plan.cwd
            assert where is not None
            shown = plan.build or "vng --build, with the tracing config items"
            progress(f"step {number}: building ({shown})")
            status, output = _run(build, where, step_dir / "build.log")
        if status != 0:
            what = "kernel build" if plan.mode == "kernel" else "build"
            verdict: Verdict = "skip"
            detail = _error_line(output)
            reason = f"{what} failed (exit {status})" + (f": {detail}" if detail else "")
        else:
            progress(f"step {number}: testing" + (" in a guest" if plan.mode != "here" else ""))
            verdict, reason, golden = _test(plan, step_dir)
    finally:
        _restore_tracked_files(plan.repo, step_dir)
    result = StepResult(
        number, commit, subject, verdict, reason, str(step_dir), _EXIT_OF[verdict], golden, extra
    )
    with open(state / STEPS_FILE, "a") as steps:
        steps.write(json.dumps(asdict(result)) + "\n")
    progress(result.line() + f" (log: {step_dir})")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m pytest_lbr.bisect.step STATE_DIR`: what `git bisect run` runs at each commit.

    Exits 0, 1 or 125 with the verdict; 130 when interrupted (git then stops the
    bisection); 255 on an internal error (git stops too: a broken step must not be
    read as "skip" at every commit)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    previous = set_progress(lambda m: print(f"pytest-lbr bisect: {m}", file=sys.stderr, flush=True))
    try:
        plan = BisectPlan.load(Path(argv[0]))
        return run_step(plan).status
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - reported, and the bisection stops
        print(f"pytest-lbr bisect: step failed: {exc!r}", file=sys.stderr)
        return 255
    finally:
        set_progress(previous)


if __name__ == "__main__":
    sys.exit(main())
