"""`pytest-lbr bisect` on the host: real git repositories in tmp_path, real steps.

The program-history tests bisect a project whose golden test needs no kernel: it
builds a trace (as tests/test_plugin.py does) and hands it to the `lbr_golden`
fixture, the check `lbr.check_golden` uses, so a changed "call path" is a real golden
mismatch reported by the plugin. The kernel-history test runs the real `vng --build`
in a tree that is not a kernel (every step skipped); the no-boot test runs the real
`pytest-lbr vm` with an image that is not a kernel. The BPF program's history in a
real kernel is tests/kernel/test_bisect_program.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_lbr.bisect.step import golden_diffs, pytest_verdict, read_session
from pytest_lbr.results import GoldenRecord, Results, SessionRecord, SplatRecord, TestResult
from tests.commands import PYTEST_LBR
from tests.test_plugin import TRACE_HELPER

ROOT = Path(__file__).resolve().parents[1]

GOLDEN_TEST = """\
from tracehelper import make_trace
from program import CALLS


def test_write(lbr_golden):
    lbr_golden(make_trace(calls=CALLS))
"""
NULL = ("rw_verify_area", "write_null")
ZERO = ("rw_verify_area", "write_zero")
#: The build "fails" at a commit whose program.py says so.
BUILD = "python3 -c \"import sys; sys.exit('broken' in open('program.py').read())\""
ARGS = ("test_prog.py", "-q", "-p", "no:hypothesispytest")


def _git(repo: Path, *args: str, check: bool = True) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    out = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert not check or out.returncode == 0, out.stderr
    return out.stdout.strip()


def _bisect(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTEST_LBR, "bisect", *args], cwd=repo, capture_output=True, text=True, timeout=timeout
    )


def _project(tmp_path: Path, versions: list[tuple[str, str]]) -> tuple[Path, list[str]]:
    """A repository with one commit per (subject, program.py) and the golden trace of the
    first recorded in it; returns it and the commits, oldest first."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "tracehelper.py").write_text(TRACE_HELPER)
    (repo / "test_prog.py").write_text(GOLDEN_TEST)
    (repo / "conftest.py").write_text("")  # rootdir conftest: the project's modules import
    (repo / ".gitignore").write_text("__pycache__/\n")
    commits = []
    for i, (subject, program) in enumerate(versions):
        (repo / "program.py").write_text(program)
        if i == 0:
            record = subprocess.run(
                [sys.executable, "-m", "pytest", *ARGS, "-p", "no:cacheprovider"]
                + ["--lbr-golden-update"],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            assert record.returncode == 0, record.stdout
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", subject)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    return repo, commits


def _calls(calls: tuple[str, ...], note: str = "") -> str:
    return f"CALLS = {calls!r}  # {note}\n"


def _section(text: str, head: str) -> list[str]:
    """The indented lines under `head` in the summary."""
    lines = f"\n{text}".split(f"\n{head}\n", 1)[1].splitlines()
    out = []
    for line in lines:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


def test_program_history_names_the_first_bad_commit_and_its_golden_diff(tmp_path: Path) -> None:
    # 10 commits after the good one; git tests the 5th first: it does not build.
    versions = [("record the golden trace", _calls(NULL, "v0"))]
    versions += [(f"harmless {i}", _calls(NULL, f"v{i}")) for i in range(1, 5)]
    versions += [("breaks the build", _calls(NULL, "broken"))]
    versions += [("fixes the build", _calls(NULL, "v6"))]
    versions += [("writes to zero", _calls(ZERO, "v7"))]
    versions += [(f"harmless {i}", _calls(ZERO, f"v{i}")) for i in range(8, 11)]
    repo, commits = _project(tmp_path, versions)
    broken, first_bad = commits[5], commits[7]

    out = _bisect(repo, "--here", "--good", commits[0], "--build", BUILD, "--", *ARGS)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert out.stdout.startswith(f"first bad commit: {first_bad} writes to zero\n"), report
    steps = _section(out.stdout, "steps:")
    assert steps[0].split()[1:3] == [broken[:12], "skip:"], report
    verdicts = {line.split()[1]: line.split()[2] for line in steps}
    assert verdicts[first_bad[:12]] == "bad:"
    assert [c for c, v in verdicts.items() if v == "bad:"] in (
        [first_bad[:12]],
        [c for c in verdicts if c in {x[:12] for x in commits[7:]} and verdicts[c] == "bad:"],
    )
    assert not [c for c in commits[:7] if verdicts.get(c[:12]) == "bad:"], report
    skipped = _section(out.stdout, "skipped (could not test):")
    assert skipped == [f"  {broken[:12]} breaks the build: build failed (exit 1)"], report
    diff = _section(
        out.stdout, f"golden diff that made {first_bad[:12]} bad (test_prog.py::test_write):"
    )
    assert diff[0] == "  __lbr_golden__/test_prog/test_write.lbr"
    assert "  -vfs_write -> write_null" in diff and "  +vfs_write -> write_zero" in diff
    # Progress went to stderr, a line per step with its verdict.
    assert f"pytest-lbr bisect:  1 {broken[:12]} skip: build failed" in out.stderr
    # The user's checkout is back: the branch, its commit, nothing modified.
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert _git(repo, "rev-parse", "HEAD") == commits[-1]
    assert _git(repo, "status", "--porcelain") == ""
    assert not Path(repo, ".git", "BISECT_START").exists()


def test_an_untested_bad_end_is_tested_for_its_diff(tmp_path: Path) -> None:
    repo, commits = _project(tmp_path, [("good", _calls(NULL)), ("bad", _calls(ZERO))])
    out = _bisect(repo, "--here", "--good", "HEAD~1", "--", *ARGS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"first bad commit: {commits[1]} bad" in out.stdout
    assert "(the bad end, tested for its diff)" in out.stdout
    assert "  +vfs_write -> write_zero" in out.stdout
    assert _git(repo, "rev-parse", "HEAD") == commits[1]


def test_only_untestable_commits_left_names_the_candidates_and_why(tmp_path: Path) -> None:
    repo, commits = _project(
        tmp_path,
        [
            ("good", _calls(NULL)),
            ("breaks the build", _calls(NULL, "broken")),
            ("tests renamed away", _calls(NULL)),
            ("bad", _calls(ZERO)),
        ],
    )
    # Rewrite the last two commits: at the third the test file holds no test (pytest
    # exits 5, "no tests collected"), the fourth brings it back.
    _git(repo, "reset", "-q", "--hard", commits[1])
    (repo / "test_prog.py").write_text(GOLDEN_TEST.replace("def test_write", "def check_write"))
    (repo / "program.py").write_text(_calls(NULL))
    _git(repo, "commit", "-qam", "tests renamed away")
    (repo / "test_prog.py").write_text(GOLDEN_TEST)
    (repo / "program.py").write_text(_calls(ZERO))
    _git(repo, "commit", "-qam", "bad")
    commits = [_git(repo, "rev-parse", f"HEAD~{n}") for n in (3, 2, 1, 0)]

    out = _bisect(repo, "--here", "--good", commits[0], "--build", BUILD, "--", *ARGS)
    assert out.returncode == 1, out.stdout + out.stderr
    head = (
        "no single first bad commit: only commits that could not be tested are left; it is one of:"
    )
    assert out.stdout.startswith(head + "\n"), out.stdout
    listed = _section(out.stdout, head)
    assert f"  {commits[1][:12]} breaks the build (skipped: build failed (exit 1))" in listed
    assert f"  {commits[2][:12]} tests renamed away (skipped: no test collected)" in listed
    assert f"  {commits[3][:12]} bad (the bad end)" in listed
    assert " bad: " not in "\n".join(_section(out.stdout, "steps:"))


def test_ctrl_c_stops_the_step_and_restores_the_checkout(tmp_path: Path) -> None:
    repo, commits = _project(
        tmp_path, [("good", _calls(NULL)), ("middle", _calls(NULL, "m")), ("bad", _calls(ZERO))]
    )
    proc = subprocess.Popen(
        [PYTEST_LBR, "bisect", "--here", "--good", commits[0], "--build", "sleep 60"]
        + ["--", *ARGS],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the step is in its build
        if ": building (sleep 60)" in line:
            break
    assert _git(repo, "rev-parse", "HEAD") == commits[1]
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert time.monotonic() - start < 30  # the build was stopped, not waited for
    assert out.startswith("interrupted: no first bad commit\n"), out
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert _git(repo, "rev-parse", "HEAD") == commits[2]
    assert _git(repo, "bisect", "log", check=False) == ""  # no bisection left behind


# -- verdicts ---------------------------------------------------------------------------


def test_pytest_statuses_map_to_bisect_verdicts() -> None:
    passed = Results(tests=[TestResult("t.py::a", "passed"), TestResult("t.py::b", "passed")])
    assert pytest_verdict(0, passed, "") == ("good", "tests passed, golden traces match (2 passed)")
    all_skipped = Results(tests=[TestResult("t.py::a", "skipped", "needs root")])
    assert pytest_verdict(0, all_skipped, "") == ("skip", "no test ran (1 skipped: needs root)")
    golden = GoldenRecord("test_x", "g.lbr", "mismatched", diff="-a\n+b\n")
    mismatch = Results(tests=[TestResult("t.py::test_x", "failed", "whatever", golden=[golden])])
    assert pytest_verdict(1, mismatch, "") == ("bad", "golden mismatch in t.py::test_x")
    assert golden_diffs(mismatch) == [("t.py::test_x", "g.lbr\n-a\n+b")]
    other = Results(tests=[TestResult("t.py::test_y", "failed", "AssertionError: 1 == 2")])
    assert pytest_verdict(1, other, "") == (
        "bad",
        "t.py::test_y failed, not a golden mismatch: AssertionError: 1 == 2",
    )
    splat = Results(splats=[SplatRecord("k", "WARNING: CPU: 0 PID: 1 at f+0x1")])
    assert pytest_verdict(1, splat, "") == (
        "bad",
        "kernel splat no test reported: WARNING: CPU: 0 PID: 1 at f+0x1",
    )
    no_btf = Results(SessionRecord("6.1.0-56-amd64", "x86_64", "graph", False, "no BTF"))
    assert pytest_verdict(125, no_btf, "") == ("skip", "tracing impossible: no BTF")
    assert pytest_verdict(125, None, "") == ("skip", "tracing impossible")
    assert pytest_verdict(5, None, "") == ("skip", "no test collected")
    assert pytest_verdict(2, None, "")[0] == "skip"
    assert pytest_verdict(4, None, "") == ("skip", "pytest usage error")
    assert pytest_verdict(124, None, "") == ("skip", "the tests ran past --timeout")


def test_the_results_of_a_real_golden_mismatch(tmp_path: Path) -> None:
    """The diff comes from the records the plugin really writes."""
    repo, _ = _project(tmp_path, [("good", _calls(NULL))])
    (repo / "program.py").write_text(_calls(ZERO))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS, "-p", "no:cacheprovider", "--lbr-results=r.jsonl"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    results = read_session(repo / "r.jsonl")
    assert results is not None and results.count("failed") == 1
    [(test, diff)] = golden_diffs(results)
    assert test == "test_prog.py::test_write"
    assert diff.splitlines()[0] == "__lbr_golden__/test_prog/test_write.lbr"
    assert diff.splitlines()[-1] == "+vfs_write -> write_zero"
    assert read_session(repo / "missing.jsonl") is None


# -- what cannot start ------------------------------------------------------------------


def test_requests_that_cannot_work_are_one_line_errors(tmp_path: Path) -> None:
    repo, commits = _project(
        tmp_path, [("a", _calls(NULL, "a")), ("b", _calls(NULL, "b")), ("c", _calls(ZERO))]
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    cases: list[tuple[Path, tuple[str, ...], str]] = [
        (plain, ("--here", "--good", "HEAD~1"), f"{plain} is not in a git repository"),
        (repo, ("--here", "--good", "nosuchrev"), "good revision 'nosuchrev' is not a commit in"),
        (repo, ("--here", "--good", "HEAD"), "good (HEAD) and bad (HEAD) are the same commit"),
        (
            repo,
            ("--here", "--good", "HEAD", "--bad", "HEAD~2"),
            "good (HEAD) is not an ancestor of bad (HEAD~2) (swapped?)",
        ),
        (repo, ("--here", "--kernel", "6.12", "--good", "HEAD~1"), "--here runs the tests in this"),
        (repo, ("--here", "--config", "x", "--good", "HEAD~1"), "--config and --configitem need"),
        (repo, ("--here", "--panic-is-bad", "--good", "HEAD~1"), "--panic-is-bad needs guests"),
        (
            repo,
            ("--here", "--kernel-src", str(repo), "--good", "HEAD~1"),
            "--here is for a program",
        ),
        (repo, ("--here",), "the following arguments are required: --good"),
    ]
    for where, args, message in cases:
        extra = ("--", *ARGS) if args != ("--here",) else ()
        out = _bisect(where, *args, *extra)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stdout == ""
        [line] = out.stderr.splitlines()
        assert line.startswith("pytest-lbr bisect: error: "), line
        assert message in line, (args, line)
    no_tests = _bisect(repo, "--here", "--good", "HEAD~1")
    assert no_tests.stderr.strip() == (
        "pytest-lbr bisect: error: no pytest arguments after --: which golden tests decide?"
    )
    (repo / "program.py").write_text(_calls(ZERO, "edited"))
    dirty = _bisect(repo, "--here", "--good", "HEAD~1", "--", *ARGS)
    assert dirty.returncode == 2
    assert dirty.stderr.strip() == (
        f"pytest-lbr bisect: error: {repo} has uncommitted changes (program.py): "
        "commit or stash them first"
    )
    _git(repo, "checkout", "-q", "--", "program.py")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    logs = _bisect(repo, "--here", "--good", "HEAD~1", "--logs", str(mine), "--", *ARGS)
    assert logs.stderr.strip() == (
        f"pytest-lbr bisect: error: --logs {mine} is not empty and holds no earlier "
        "bisection's logs"
    )
    assert (mine / "notes.txt").exists()
    _git(repo, "bisect", "start", "HEAD", "HEAD~2")
    busy = _bisect(repo, "--here", "--good", "HEAD~1", "--", *ARGS)
    assert busy.stderr.strip().endswith(
        f"a git bisect is already in progress in {repo} (`git bisect reset` ends it)"
    )
    _git(repo, "bisect", "reset")
    assert _git(repo, "rev-parse", "HEAD") == commits[-1]


# -- kernel history and guests ----------------------------------------------------------


def _vm_tools_or_skip() -> None:
    from pytest_lbr.vm import VmError, find_tools

    try:
        find_tools()
    except VmError as exc:
        pytest.skip(str(exc))


def _tree(tmp_path: Path, subjects: list[str]) -> tuple[Path, list[str]]:
    """A git repository with one (empty-ish) commit per subject."""
    tree = tmp_path / "linux"
    tree.mkdir()
    _git(tree, "init", "-q", "-b", "master")
    commits = []
    for n, subject in enumerate(subjects):
        (tree / "VERSION").write_text(f"{n}\n")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-qm", subject)
        commits.append(_git(tree, "rev-parse", "HEAD"))
    return tree, commits


def test_kernel_history_dry_run_builds_with_the_tracing_config(tmp_path: Path) -> None:
    _vm_tools_or_skip()
    tree, commits = _tree(tmp_path, ["v6.9", "v6.10-rc1", "v6.10"])
    config = tmp_path / "my.config"
    config.write_text("CONFIG_X=y\n")
    out = _bisect(
        tmp_path,
        "--kernel-src", str(tree), "--good", commits[0], "--bad", commits[2],
        "--config", str(config), "--configitem", "CONFIG_NET=y", "--dry-run",
        "--", "tests/test_golden.py", "-k", "golden",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"git -C {tree} bisect start {commits[2]} {commits[0]}"
    # The command's own interpreter (its console script's: bin/python or bin/python3).
    python = Path(sys.executable).parent
    assert re.match(
        rf"git -C {re.escape(str(tree))} bisect run {re.escape(str(python))}/python3?"
        r" -P -m pytest_lbr\.bisect\.step ",
        lines[1],
    ), lines[1]
    build = lines[2]
    assert build.startswith(f"  (step) cd {tree} && ") and " --build --config " in build
    for item in (
        "CONFIG_DEBUG_INFO_BTF=y",
        "CONFIG_FUNCTION_GRAPH_TRACER=y",
        "CONFIG_KPROBES=y",
        "CONFIG_BPF_EVENTS=y",
        "CONFIG_NET=y",
    ):
        assert f"--configitem {item}" in build
    test = lines[3]
    assert test.startswith(f"  (step) cd {tmp_path} && ")
    assert f" vm --kernel {tree} --bisect --kernel-log --results " in test
    assert test.endswith("-- --lbr --lbr-require tests/test_golden.py -k golden")
    assert lines[4] == f"git -C {tree} bisect reset"


def test_a_kernel_that_does_not_build_is_skipped(tmp_path: Path) -> None:
    """The real `vng --build` in a tree that is not a kernel: skip, never bad."""
    _vm_tools_or_skip()
    tree, commits = _tree(tmp_path, ["good", "middle", "bad"])
    out = _bisect(tmp_path, "--kernel-src", str(tree), "--good", commits[0], "--", "tests")
    assert out.returncode == 1, out.stdout + out.stderr
    steps = _section(out.stdout, "steps:")
    assert len(steps) == 1 and steps[0].split()[1:3] == [commits[1][:12], "skip:"], out.stdout
    assert "kernel build failed (exit " in steps[0]
    assert _git(tree, "rev-parse", "HEAD") == commits[2]


@pytest.mark.slow
def test_a_guest_that_does_not_boot_is_a_skip_never_bad(tmp_path: Path) -> None:
    """A step whose kernel image cannot boot, through the real `pytest-lbr vm`: 125."""
    _vm_tools_or_skip()
    bogus = tmp_path / "vmlinuz-bogus"
    bogus.write_bytes(b"\x7fELF not really a kernel" * 100)
    repo, commits = _project(
        tmp_path, [("good", _calls(NULL)), ("middle", _calls(NULL, "m")), ("bad", _calls(ZERO))]
    )
    out = _bisect(
        repo, "--kernel", str(bogus), "--boot-timeout", "60", "--good", commits[0], "--", *ARGS
    )
    assert out.returncode == 1, out.stdout + out.stderr
    steps = _section(out.stdout, "steps:")
    assert len(steps) == 1, out.stdout
    assert steps[0].split()[1:3] == [commits[1][:12], "skip:"], out.stdout
    assert "guest did not boot" in steps[0]
    status = [
        line
        for line in (repo / ".git" / "pytest-lbr-bisect" / "steps.jsonl").read_text().splitlines()
    ]
    assert '"status": 125' in status[0]
    assert f"  {commits[1][:12]} middle (skipped: guest did not boot" in out.stdout


REWORD_PLUGIN = """
import dataclasses

import pytest_lbr.golden
from pytest_lbr.golden import check


class Reworded(check.GoldenCheck):
    def run(self, *args, **kwargs):
        result = super().run(*args, **kwargs)
        words = " ".join(reversed(result.message.split())) if result.message else ""
        return dataclasses.replace(result, message=f"REWORDED: {words}" if words else "")


check.GoldenCheck = pytest_lbr.golden.GoldenCheck = Reworded
"""


@pytest.mark.parametrize("program", [NULL, ZERO], ids=["match", "mismatch"])
def test_rewording_every_golden_message_changes_no_verdict(
    tmp_path: Path, program: tuple[str, str]
) -> None:
    """Every message golden/ shows reworded (the words reversed): the step's verdict,
    reason and golden diffs come from the records, so they stay the same."""
    repo, _ = _project(tmp_path, [("good", _calls(NULL))])
    (repo / "program.py").write_text(_calls(program))
    (repo / "reword.py").write_text(REWORD_PLUGIN)
    seen = []
    for extra in ([], ["-p", "reword"]):
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *ARGS, "-p", "no:cacheprovider", *extra]
            + ["--lbr-results=r.jsonl", "-o", "pythonpath=."],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        results = read_session(repo / "r.jsonl")
        assert results is not None, run.stdout + run.stderr
        seen.append((pytest_verdict(run.returncode, results, ""), golden_diffs(results)))
        if extra and program == ZERO:
            # The reworded run really said it differently: text matching would miss it.
            assert "REWORDED:" in run.stdout and "golden trace mismatch:" not in run.stdout
    assert seen[0] == seen[1]
    assert seen[0][0][0] == ("good" if program == NULL else "bad")


# -- guests: verdicts from the records `pytest-lbr vm` writes -------------------------------

#: The console of a real 6.12 guest that panicked (`echo c > /proc/sysrq-trigger`).
PANIC_CONSOLE = Path(__file__).parent / "data" / "console-6.12-panic.txt"


def _reworded(text: str) -> str:
    return "REWORDED: " + " ".join(reversed(text.split())) if text else ""


def _guest(results: Path, label: str, end: str, status: int | None, error: str, console: str):
    from pytest_lbr.vm.run import GuestResult, write_guest_record

    (results / label).mkdir(parents=True)
    guest = GuestResult(label, 6 if status is None else status, results / label, error=error)
    write_guest_record(guest, f"/boot/vmlinuz-{label}", end, error, console)  # type: ignore[arg-type]


def test_guest_verdicts_come_from_the_guest_records_whatever_the_runner_says(
    tmp_path: Path,
) -> None:
    """Each way a guest can end, as `pytest-lbr vm` records it: the verdict is the same
    when every message of the runner is reworded; a panic is read from the record."""
    from pytest_lbr.bisect.step import BisectPlan, _guest_verdict

    panic = PANIC_CONSOLE.read_text()
    ends = [
        ("no_boot", None, "guest did not boot within 300s", ""),
        ("hang", None, "guest ran past the 1500s limit (hang?)", ""),
        ("died", None, "guest exited without reporting a status", panic),
        ("not_started", None, "no kernel 4.19 installed", ""),
        ("reported", 5, "", ""),
    ]
    seen: dict[str, list[tuple[str, str]]] = {}
    for words in (str, _reworded):
        for end, status, error, console in ends:
            results = tmp_path / words.__name__ / end
            _guest(results, "6.12", end, status, words(error), console)
            for bad in (False, True):
                plan = BisectPlan("vm", "r", "c", "s", [], kernels=["6.12"], panic_is_bad=bad)
                verdict, reason = _guest_verdict(plan, results)
                seen.setdefault(f"{end} {bad}", []).append((verdict, reason.split(" [")[0]))
    for key, (plain, reworded) in seen.items():
        assert plain == reworded, key
    assert seen["died True"][0] == (
        "bad",
        "kernel panicked (Kernel panic - not syncing: sysrq triggered crash)",
    )
    assert seen["died False"][0][0] == "skip"
    assert seen["no_boot False"][0] == ("skip", "guest did not boot")
    assert seen["hang True"][0] == ("skip", "guest did not finish (hang)")
    assert seen["reported False"][0] == ("skip", "no test collected")
    assert seen["not_started False"][0][1] == "pytest-lbr vm could not start the guest"


REWORD_VM = """
import pytest_lbr.vm.messages as messages

_say = messages.say


def _reworded(text):
    return "REWORDED: " + " ".join(reversed(text.split()))


messages.say = lambda message: _say(_reworded(message))

import pytest_lbr.vm.run as run

_init = run.GuestError.__init__


def _init_reworded(self, message, end, why, console=""):
    _init(self, _reworded(message), end, _reworded(why), console)


run.GuestError.__init__ = _init_reworded
"""


@pytest.mark.slow
def test_rewording_the_vm_runners_messages_changes_no_verdict(tmp_path: Path) -> None:
    """The real `pytest-lbr vm --bisect` with a kernel that does not boot, once as it
    is and once with every `[vm]` line and guest error reworded (a sitecustomize): the
    step's verdict and reason come from the guest records, so they stay the same."""
    from pytest_lbr.bisect.step import BisectPlan, _guest_verdict

    _vm_tools_or_skip()
    bogus = tmp_path / "vmlinuz-bogus"
    bogus.write_bytes(b"\x7fELF not really a kernel" * 100)
    (tmp_path / "reword").mkdir()
    (tmp_path / "reword" / "sitecustomize.py").write_text(REWORD_VM)
    plan = BisectPlan("vm", "r", str(tmp_path), "s", [], kernels=[str(bogus)])
    seen = []
    for name, env in (("plain", {}), ("reword", {"PYTHONPATH": str(tmp_path / "reword")})):
        results = tmp_path / name
        out = subprocess.run(
            [PYTEST_LBR, "vm", "--kernel", str(bogus), "--tcg", "--bisect", "--boot-timeout"]
            + ["60", "--results", str(results), "--", "-q"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **env},
        )
        assert out.returncode == 125, out.stderr
        assert ("REWORDED:" in out.stderr) == (name == "reword"), out.stderr
        verdict, reason = _guest_verdict(plan, results)
        seen.append((verdict, reason.split(" [")[0]))
    assert seen[0] == seen[1] == ("skip", "guest did not boot")
