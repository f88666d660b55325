"""Faults and bad input in a tracing guest: the kernel is left as it was found.

A pytest run (the "child", a subprocess) arms a graph-backend trace through the
`lbr` fixture and LBR hooks (`LbrCapture` on software perf events, as in
test_lifecycle.py) and is then killed, timed out or crashes. The kernel's BPF
programs and links, every process's perf event fds and the tracefs state are
compared before and after. What a dead process cannot undo itself (a tracefs
instance and its probes) must be removed by the NEXT session; BPF objects die
with the process's fds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_lbr.kernel.tracefs import INSTANCE_PREFIX
from tests.commands import PYTEST_QUIET
from tests.kernel.kernel_state import bpf_ids, tracefs_left_behind, tracefs_state

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]


def _perf_fds() -> int:
    """perf event fds held by any process (a dead child's must be gone)."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:  # the process or fd went away meanwhile
            pass
    return n


def state() -> dict[str, object]:
    return {
        "progs": bpf_ids("prog"),
        "links": bpf_ids("link"),
        "perf_fds": _perf_fds(),
        **tracefs_state(),
    }


def settle(
    before: dict[str, object], keys: tuple[str, ...] = (), timeout: float = 30.0
) -> dict[str, object]:
    """What is left behind (`left_behind`) once the kernel has released a dead
    process's objects (deferred work), on `keys` only when given: {} when nothing is."""
    deadline = time.monotonic() + timeout
    left = left_behind(before, state(), keys)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = left_behind(before, state(), keys)
    return left


def left_behind(
    before: dict[str, object], after: dict[str, object], keys: tuple[str, ...] = ()
) -> dict[str, object]:
    """What `after` holds that `before` did not: BPF programs and links, perf fds, and
    tracefs state (`tracefs_left_behind`). What only went away is no leak: the outer
    session's hooks of an earlier test, released by the kernel later (a shuffled
    order once failed a strict comparison on a function enabled once less)."""
    out: dict[str, object] = {}
    for key in ("progs", "links"):
        new = after[key] - before[key]  # type: ignore[operator]
        if new:
            out[key] = new
    if after["perf_fds"] > before["perf_fds"]:  # type: ignore[operator]
        out["perf_fds"] = (before["perf_fds"], after["perf_fds"])
    tracefs = [{k: v for k, v in d.items() if k not in _BPF_STATE} for d in (before, after)]
    out.update(tracefs_left_behind(*tracefs))
    return {k: v for k, v in out.items() if not keys or k in keys}


#: The keys of `state()` that are not tracefs files.
_BPF_STATE = ("progs", "links", "perf_fds")


CHILD = textwrap.dedent("""
    import os, signal, time
    from pathlib import Path

    import pytest

    from pytest_lbr.kernel import perf
    from pytest_lbr.capture.lbr.backend import LbrCapture
    from pytest_lbr.targets import parse_target

    ACTION = os.environ["LBR_FAULT_ACTION"]
    READY = Path(os.environ["LBR_FAULT_READY"])


    def test_traced(lbr):
        hooks = LbrCapture(
            [parse_target("kfunc:vfs_write"), parse_target("tp:syscalls/sys_enter_getppid")],
            check=False,
            open_events=perf.software_branch_events,
        )
        try:
            hooks.start()
            with lbr.trace("kfunc:write_null"):
                READY.write_text(str(os.getpid()))
                if ACTION == "exit":
                    os._exit(3)  # a worker that dies on the spot
                if ACTION == "timeout":
                    # Fire pytest-timeout's own SIGALRM handler now rather than after
                    # the --timeout that had to cover arming under TCG.
                    signal.setitimer(signal.ITIMER_REAL, 1.0)
                time.sleep(600)
        finally:
            hooks.close()


    def test_plain():
        pass
    """)

PROBE = """
def test_probe(lbr):
    assert lbr.available, lbr.reason
"""


def run_child(
    folder: Path, action: str, *args: str, wait: Callable[[subprocess.Popen[str], Path], None]
) -> tuple[int, str]:
    """Start the child pytest, let `wait` act on it once it is traced; (status, output)."""
    (folder / "test_child.py").write_text(CHILD)
    ready = folder / "ready"
    ready.unlink(missing_ok=True)
    env = {**os.environ, "LBR_FAULT_ACTION": action, "LBR_FAULT_READY": str(ready)}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *PYTEST_QUIET, "--lbr",
         "--lbr-backend=graph", *args, "test_child.py"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait(proc, ready)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out


def wait_ready(proc: subprocess.Popen[str], ready: Path, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert proc.poll() is None, f"child ended before arming: {proc.communicate()[0]}"
        assert time.monotonic() < deadline, "child never armed its trace"
        time.sleep(0.2)


def next_session(folder: Path) -> str:
    """A new `pytest --lbr` session: its backend probe removes what dead ones left."""
    (folder / "test_probe.py").write_text(PROBE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST_QUIET, "--lbr",
         "--lbr-backend=graph", "test_probe.py"],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def stale(before: dict[str, object]) -> list[str]:
    known: list[str] = before["instances"]  # type: ignore[assignment]
    now: list[str] = tracefs_state()["instances"]  # type: ignore[assignment]
    return [i for i in now if i not in known and i.startswith(INSTANCE_PREFIX)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.one_kernel("6.12")),
        pytest.param(signal.SIGKILL, id="SIGKILL", marks=pytest.mark.one_kernel("6.1")),
    ],
)
def test_killed_mid_trace_next_session_cleans_up(tmp_path: Path, sig: signal.Signals) -> None:
    before = state()

    def kill(proc: subprocess.Popen[str], ready: Path) -> None:
        wait_ready(proc, ready)
        proc.send_signal(sig)

    status, out = run_child(tmp_path, "sleep", wait=kill)
    assert status == -sig, out
    # Python dies on SIGTERM without unwinding (pytest installs no handler), like SIGKILL:
    # the instance and its kretprobe are left; the BPF hooks and perf fds died with it.
    left = stale(before)
    assert left, "the killed run left no tracefs instance: nothing to test"
    assert all(re.match(rf"{INSTANCE_PREFIX}-\d+-\d+$", i) for i in left)
    bpf = ("progs", "links", "perf_fds")
    assert settle(before, bpf) == {}
    next_session(tmp_path)
    assert settle(before) == {}


@pytest.mark.slow
def test_pytest_timeout_inside_a_trace_releases_everything(tmp_path: Path) -> None:
    pytest.importorskip("pytest_timeout")
    before = state()
    status, out = run_child(
        tmp_path, "timeout", "--timeout=600", "--timeout-method=signal", wait=wait_ready
    )
    assert status == 1, out
    assert "Timeout" in out and "1 failed, 1 passed" in out, out
    # The timeout unwinds the test: the trace and the hooks close themselves, no next
    # session needed.
    assert settle(before) == {}


@pytest.mark.slow
@pytest.mark.one_kernel("6.1")
def test_crashed_xdist_worker_next_session_cleans_up(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    before = state()
    status, out = run_child(tmp_path, "exit", "-n", "2", wait=lambda proc, ready: None)
    assert status == 1, out
    assert re.search(r"worker '?gw\d'? crashed", out) or "node down" in out, out
    assert stale(before), "the crashed worker left no tracefs instance: nothing to test"
    next_session(tmp_path)
    assert settle(before) == {}


# -- bad input with a tracing kernel: one line each, nothing left armed ---------------

#: target -> a regex of the line it must fail with
BAD_TARGETS = {
    "kprobe:vfs_write": "bad target 'kprobe:vfs_write': unknown kind 'kprobe'",
    "prog:4000000": "no BPF program with id 4000000 is loaded",
    # (a guest may have no program loaded at all: then it says so)
    "prog:name:no_such_prog_xyz": "prog:name:no_such_prog_xyz: no (loaded BPF program has "
    "this name|BPF program is loaded at all)",
    "kfunc:no_such_function_xyz": "no traceable kernel function matches 'no_such_function_xyz'",
    "kfunc:zz_nothing_matches_*": r"no traceable kernel function matches 'zz_nothing_matches_\*'",
    "tp:no_such/event": "no trace event 'no_such/event'",
    "uprobe:/no/such/binary:main": "uprobe:/no/such/binary:main: no such file /no/such/binary",
    f"uprobe:{sys.executable}:no_such_fn_xyz": "no function named 'no_such_fn_xyz'",
}


@pytest.fixture(scope="module")
def bad_targets(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    """One pytest session (a subprocess, graph backend) tracing each bad target twice:
    as a marker in test_marker.py, in `with lbr.trace(...)` in test_with.py. Its
    output and the kernel's state before it."""
    folder = tmp_path_factory.mktemp("bad_targets")
    # One marked test per target (a marker takes literal targets).
    (folder / "test_marker.py").write_text(
        "import pytest\n"
        + "".join(
            f"\n@pytest.mark.lbr({t!r})\ndef test_{i}():\n    pass\n"
            for i, t in enumerate(BAD_TARGETS)
        )
    )
    (folder / "test_with.py").write_text(  # as is: the line numbers checked below
        "".join(
            f"\ndef test_{i}(lbr):\n    with lbr.trace({t!r}):\n        pass\n"
            for i, t in enumerate(BAD_TARGETS)
        )
    )
    before = state()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--lbr", "--lbr-backend=graph", *PYTEST_QUIET],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    # Each of them failed, nothing else (no error, no pass).
    assert re.search(rf"^=+ {2 * len(BAD_TARGETS)} failed in \S+s(?: \(\S+\))? =+$", out, re.M), out
    return out, before


def _no_noise(out: str) -> None:
    for noise in ("Traceback", "INTERNALERROR", "During handling", "session.py", "tracer.py"):
        assert noise not in out, out


def test_bad_targets_fail_in_one_line_with_a_tracing_kernel(
    bad_targets: tuple[str, dict[str, object]],
) -> None:
    out, before = bad_targets
    for message in BAD_TARGETS.values():
        lines = [ln for ln in out.splitlines() if re.search(f"@pytest.mark.lbr: .*{message}", ln)]
        assert lines, f"{message!r} not in:\n{out}"
    _no_noise(out)
    assert settle(before) == {}


@pytest.mark.slow
def test_bad_targets_inside_with_lbr_trace_fail_in_one_line(
    bad_targets: tuple[str, dict[str, object]],
) -> None:
    """The same targets in `with lbr.trace(...)`: one line at the test's own line, naming
    the error, no traceback through the plugin (docs/errors.md)."""
    out, before = bad_targets
    for i, message in enumerate(BAD_TARGETS.values()):
        line = 3 + 4 * i  # the `with` line of test_<i>
        pattern = f"^test_with.py:{line}: (TargetError|CaptureError): .*{message}"
        assert [ln for ln in out.splitlines() if re.search(pattern, ln)], (
            f"{pattern!r} not in:\n{out}"
        )
    _no_noise(out)
    assert settle(before) == {}


def test_uprobe_on_missing_binary_or_symbol_with_lbr_hooks(tmp_path: Path) -> None:
    from pytest_lbr.bpf.libbpf import BpfError
    from pytest_lbr.capture import CaptureError
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.targets import parse_target

    before = state()
    with pytest.raises(CaptureError) as missing:
        with HookSet([parse_target("uprobe:/no/such/binary:main")], snapshot=False):
            pass
    assert str(missing.value) == "uprobe:/no/such/binary:main: no such file /no/such/binary"
    with pytest.raises((CaptureError, BpfError)) as nosym:
        with HookSet([parse_target("uprobe:/bin/true:no_such_symbol_xyz")], snapshot=False):
            pass
    text = str(nosym.value)
    assert "uprobe:/bin/true:no_such_symbol_xyz" in text and "\n" not in text, text
    assert settle(before) == {}
