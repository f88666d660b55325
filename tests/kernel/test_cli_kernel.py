"""`pytest-lbr trace` and `pytest-lbr doctor` in the guests, checked against
the output docs/cli.md documents. The live trace is read as it runs: hits of
other processes (processes writing to /dev/null), printed before the trace ends."""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.commands import PYTEST_LBR

pytestmark = pytest.mark.kernel

TRACEFS = Path("/sys/kernel/tracing")
HIT = re.compile(
    r"Hit at (\S+): cpu=\d+ pid=(?P<pid>\d+) tid=\d+(?: comm=\S+)?(?: in_interrupt)?"
    r"(?P<retval> retval=-?\d+)? branches=(?P<n>\d+)"
)
#: A branch line; "(unseen caller)" stands for a caller the function tracer never
#: recorded (the graph backend, docs/guide.md).
_END = r"(?:\S+|\(unseen caller\))"
BRANCH = re.compile(rf"(\[#\d+\] )?{_END} (\(\S+:\d+\) )?-> {_END}( \(\S+:\d+\))?")


#: `pytest-lbr trace` on each backend: the graph backend, and the LBR backend on
#: software perf events (no PMU under TCG: every hit, no branches).
BACKEND_ARGS = {
    "graph": ("--backend", "graph"),
    "lbr": ("--backend", "lbr", "--pmu", "software"),
}
NO_BRANCHES = "note: no branches: the lbr backend ran on software perf events"
#: Each backend's CLI runs in one guest (`one_kernel`: the output is the same code on
#: both kernels, and each run is an inner session turning the tracer on and off).
BACKEND_KERNEL = {"graph": "6.1", "lbr": "6.12"}
backends = pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=pytest.mark.one_kernel(BACKEND_KERNEL[b])) for b in BACKEND_ARGS],
)


def cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTEST_LBR, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def keep_output(name: str, res: subprocess.CompletedProcess[str]) -> None:
    """Save the real output beside the guest's results (docs/cli.md quotes it)."""
    results = os.environ.get("PYTEST_LBR_RESULTS")
    if results:
        Path(results, f"cli-{name}.txt").write_text(res.stdout + "--- stderr\n" + res.stderr)


def leftovers() -> list[str]:
    """tracefs instances and kprobe events the commands made and did not remove (not
    this session's own instance, which the `lbr` fixture's backend keeps until the end
    when an earlier test traced system-wide)."""
    ours = f"pytest_lbr-{os.getpid()}-"
    inst = [
        p.name
        for p in (TRACEFS / "instances").iterdir()
        if p.name.startswith("pytest_lbr") and not p.name.startswith(ours)
    ]
    events = (TRACEFS / "kprobe_events").read_text().splitlines()
    return inst + [e for e in events if "pytest_lbr" in e or "lbr_" in e]


class Lines:
    """A running command's stdout and stderr, read line by line as they come."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen(
            [PYTEST_LBR, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.out: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        self.stdout: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True).start()
        self._err_done = threading.Event()
        threading.Thread(target=self._read_err, daemon=True).start()

    @staticmethod
    def _read(stream: IO[str] | None, into: queue.Queue[str | None]) -> None:
        assert stream is not None
        for line in stream:
            into.put(line.rstrip("\n"))
        into.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line.rstrip("\n"))
        self._err_done.set()

    def next(self, timeout: float) -> str | None:
        """The next stdout line (None at its end); fails after `timeout` seconds."""
        try:
            line = self.out.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output line in {timeout} s; stderr: {self.err}") from None
        if line is not None:
            self.stdout.append(line)
        return line

    def until_header(self, timeout: float, pid: int | None = None) -> str:
        """Lines up to the next hit header (of process `pid`, if given)."""
        end = time.monotonic() + timeout
        while True:
            line = self.next(max(end - time.monotonic(), 0.1))
            assert line is not None, f"output ended; stderr: {self.err}"
            m = HIT.fullmatch(line)
            if m and (pid is None or int(m.group("pid")) == pid):
                return line

    def wait_armed(self, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while not any(line.startswith("Tracing ") for line in self.err):
            assert self.proc.poll() is None, self.err
            assert time.monotonic() < end, f"not armed in {timeout} s: {self.err}"
            time.sleep(0.1)

    def kill(self) -> None:
        """End it if it still runs, and reap it (a zombie's pid looks alive: its
        tracefs instance would not count as stale)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def finish(self, timeout: float = 600) -> int:
        """Wait for the end; the rest of stdout read."""
        rc = self.proc.wait(timeout=timeout)
        while self.next(timeout=60) is not None:
            pass
        self._err_done.wait(60)
        return rc


def headers(lines: list[str]) -> list[re.Match[str]]:
    return [m for m in map(HIT.fullmatch, lines) if m]


#: A process that writes "x\n" (os.write: one write(2), vfs_write returns 2) to
#: /dev/null, `every` seconds or once per line on stdin ("poked"), after naming
#: itself (prctl PR_SET_NAME: its comm). No fork per write: a shell loop's
#: `sleep` is a fork and exec each time, hundreds of thousands of function records,
#: more than the live reader parses in a guest (docs/cli.md).
#: "badfd": the same writes to a read-only fd, which vfs_write refuses (-EBADF).
WRITER = """
import ctypes, os, sys, time
name, how, every = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
fd = os.open("/dev/null", os.O_RDONLY if how == "badfd" else os.O_WRONLY)
print("ready", flush=True)
def write():
    try:
        os.write(fd, b"x\\n")
    except OSError:
        pass
if how == "poked":
    for _ in sys.stdin:
        write()
while True:
    write()
    time.sleep(every)
"""


def start_writer(name: str, how: str = "write", every: float = 0.05) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, name, how, str(every)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def stop_writer(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def writer() -> Iterator[subprocess.Popen[str]]:
    """Another process ("lbr-writer") writing to /dev/null about 20 times a second."""
    proc = start_writer("lbr-writer")
    yield proc
    stop_writer(proc)


@pytest.mark.slow
@backends
def test_trace_prints_a_hit_in_the_documented_format(
    writer: subprocess.Popen[str], backend: str
) -> None:
    res = cli(
        "trace", "kfunc:vfs_write", *BACKEND_ARGS[backend], "--pid", str(writer.pid), "--count", "1"
    )
    keep_output(f"trace-{backend}", res)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    m = HIT.fullmatch(lines[0])
    assert m and m.group(1) == "kfunc:vfs_write", res.stdout
    assert int(m.group("pid")) == writer.pid and m.group("retval") == " retval=2", lines[0]
    assert " comm=lbr-writer " in lines[0]
    err = res.stderr.splitlines()
    assert err[0].startswith(
        f"Tracing kfunc:vfs_write with the {backend} backend (pid {writer.pid}; "
    )
    assert err[-1] == "1 hit(s), 0 record(s) lost"
    assert not leftovers()
    if backend == "lbr":
        assert lines == [lines[0]] and m.group("n") == "0", res.stdout
        assert err[1].startswith(NO_BRANCHES), err
        return
    # A call tree: the writer's write(2): ksys_write hands it to vfs_write (whose
    # return value the hit has), which calls write_null.
    assert lines[1] == "ksys_write", res.stdout
    assert lines[2].split()[:3] == ["vfs_write", "=", "2"], res.stdout
    assert any(line.split()[:1] == ["write_null"] and line.startswith("    ") for line in lines)
    assert not any(" -> " in line for line in lines), res.stdout
    # --edges: the branch records, one line per branch; inlined frames (with a debug
    # vmlinux, as on 6.1) follow on indented continuation lines.
    res = cli(
        "trace",
        "kfunc:vfs_write",
        *BACKEND_ARGS[backend],
        "--pid",
        str(writer.pid),
        "--count",
        "1",
        "--edges",
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    m = HIT.fullmatch(lines[0])
    assert m, res.stdout
    n = int(m.group("n"))
    branch_lines = [line for line in lines[1:] if not line.startswith("    . inlined ")]
    assert n == len(branch_lines) > 0 and lines[1].startswith(f"[#{n - 1:02d}] ")
    assert all(BRANCH.fullmatch(line) for line in branch_lines), res.stdout
    # The writer's write(2): ksys_write hands it to vfs_write, which calls write_null.
    assert "-> vfs_write+0x0" in lines[1]
    assert any("-> write_null+0x0" in line for line in branch_lines), res.stdout


@pytest.mark.slow
def test_trace_disasm_shows_the_call_instruction(writer: subprocess.Popen[str]) -> None:
    """--disasm: capstone over the debug vmlinux (6.1) or /proc/kcore (6.12)."""
    res = cli("trace", "kfunc:vfs_write", "--pid", str(writer.pid), "--count", "1", "--disasm")
    keep_output("trace-disasm", res)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert HIT.fullmatch(lines[0]), res.stdout
    assert "-> vfs_write+0x0" in lines[1]
    insns = []
    for line in lines[2:]:
        if not line.startswith("    "):
            break
        if not line.startswith("    . inlined "):  # 6.1: inlined frames of the branch
            insns.append(line)
    assert insns and not any("no disassembly" in i for i in insns), res.stdout
    # The taken branch is marked: the call into vfs_write, inside ksys_write.
    marked = [i for i in insns if i.startswith("    => ")]
    assert len(marked) == 1 and "ksys_write+0x" in marked[0], insns
    assert re.search(r"\bcall\b", marked[0]), insns
    assert not leftovers()


@pytest.mark.slow
@backends
def test_trace_prints_each_hit_as_it_arrives(backend: str) -> None:
    """A process writes once each time it is poked: each write is printed while the
    trace runs, before the next one is asked for (--pid: only its records, nothing
    lost); Ctrl-C ends it with a summary and nothing left behind."""
    poked = start_writer("lbr-poked", "poked")
    assert poked.stdin is not None
    trace = Lines("trace", "kfunc:vfs_write", *BACKEND_ARGS[backend], "--pid", str(poked.pid))
    try:
        trace.wait_armed()
        arrived = []
        for _ in range(3):
            poked.stdin.write("go\n")
            poked.stdin.flush()
            started = time.monotonic()
            header = trace.until_header(timeout=300)
            arrived.append(time.monotonic() - started)
            assert trace.proc.poll() is None  # printed while it runs
            m = HIT.fullmatch(header)
            assert m and int(m.group("pid")) == poked.pid, header
            assert " comm=lbr-poked " in header and m.group("retval") == " retval=2"
        trace.proc.send_signal(signal.SIGINT)
        rc = trace.finish()
    finally:
        trace.kill()
        stop_writer(poked)
    keep_output(f"trace-poked-{backend}", _completed(trace, rc))
    assert rc == 0, trace.err
    assert "Traceback" not in "\n".join(trace.err)
    assert len(headers(trace.stdout)) == 3  # one per write, none twice
    assert trace.err[-1] == "3 hit(s), 0 record(s) lost", trace.err
    assert not leftovers()
    print(f"\nseconds from a write to its printed hit: {', '.join(f'{t:.1f}' for t in arrived)}")


@pytest.mark.slow
@backends
def test_trace_all_streams_hits_of_other_processes(
    writer: subprocess.Popen[str], backend: str
) -> None:
    """Default scope: every process but its own. The writer's hits are printed while the
    trace runs (it has no end but Ctrl-C); the trace itself is never in them. Under
    TCG the reader is behind every function of every task and loses most records
    (docs/cli.md), so a writer that keeps writing, not a single write."""
    trace = Lines("trace", "kfunc:vfs_write", *BACKEND_ARGS[backend])
    try:
        trace.wait_armed()
        assert trace.err[0] == (
            f"Tracing kfunc:vfs_write with the {backend} backend (every process but this one; "
            "until Ctrl-C; hits are printed as they complete). Ctrl-C to stop."
        ), trace.err
        started = time.monotonic()
        trace.until_header(timeout=300, pid=writer.pid)
        first = time.monotonic() - started
        assert trace.proc.poll() is None
        trace.proc.send_signal(signal.SIGINT)
        rc = trace.finish()
    finally:
        trace.kill()
    keep_output(f"trace-live-{backend}", _completed(trace, rc))
    assert rc == 0, trace.err
    assert "Traceback" not in "\n".join(trace.err)
    shown = headers(trace.stdout)
    assert trace.proc.pid not in {int(m.group("pid")) for m in shown}  # never itself
    assert re.fullmatch(rf"{len(shown)} hit\(s\), \d+ record\(s\) lost", trace.err[-1]), trace.err
    assert not leftovers()
    print(f"\nseconds from arming to the writer's first printed hit: {first:.1f}")


def _completed(lines: Lines, rc: int) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(
        lines.proc.args, rc, "\n".join(lines.stdout) + "\n", "\n".join(lines.err) + "\n"
    )


@pytest.mark.slow
@backends
def test_trace_all_count_shows_other_processes(writer: subprocess.Popen[str], backend: str) -> None:
    trace = Lines("trace", "kfunc:vfs_write", *BACKEND_ARGS[backend], "--all", "--count", "5")
    try:
        first = trace.until_header(timeout=300)
        rc = trace.finish()
    finally:
        trace.kill()
    keep_output(f"trace-all-{backend}", _completed(trace, rc))
    assert rc == 0, trace.err
    shown = headers(trace.stdout)
    assert len(shown) == 5 and shown[0].group(0) == first
    pids = {int(m.group("pid")) for m in shown}
    assert writer.pid in pids and trace.proc.pid not in pids, trace.stdout
    assert trace.err[-1].startswith("5 hit(s), "), trace.err
    assert not leftovers()


@pytest.mark.slow
@backends
def test_trace_json_of_one_pid(writer: subprocess.Popen[str], backend: str) -> None:
    """--pid P --json: only P's hits, one JSON object per line, while another process
    writes too."""
    other = start_writer("lbr-other", every=0.01)
    try:
        res = cli(
            "trace",
            "kfunc:vfs_write",
            *BACKEND_ARGS[backend],
            "--pid",
            str(writer.pid),
            "--json",
            "--count",
            "3",
        )
    finally:
        stop_writer(other)
    keep_output(f"trace-json-{backend}", res)
    assert res.returncode == 0, res.stderr
    hits = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(hits) == 3
    for hit in hits:
        assert set(hit) == {
            "target",
            "cpu",
            "pid",
            "tid",
            "comm",
            "in_interrupt",
            "retval",
            "timestamp_ns",
            "branches",
        }
        assert (hit["target"], hit["pid"], hit["comm"], hit["retval"]) == (
            "kfunc:vfs_write",
            writer.pid,
            "lbr-writer",
            2,
        )
        assert hit["in_interrupt"] is False and hit["timestamp_ns"] > 0
        if backend == "lbr":
            assert hit["branches"] == []  # software perf events: no branch records
            continue
        first = hit["branches"][0]
        assert first["kind"] == "call" and first["dst"]["symbol"] == "vfs_write"
        assert first["dst"]["offset"] == 0 and first["src"]["symbol"] == "ksys_write"
        assert int(first["src"]["addr"], 16) > 0
        assert any(b["dst"]["symbol"] == "write_null" for b in hit["branches"])
    assert [h["timestamp_ns"] for h in hits] == sorted(h["timestamp_ns"] for h in hits)
    assert not leftovers()


@pytest.mark.slow
@backends
def test_trace_errors_only_shows_error_returns(writer: subprocess.Popen[str], backend: str) -> None:
    """A process writing to a read-only fd: vfs_write returns -EBADF. --errors-only
    shows those and not the other writer's successful writes; --comm only that
    process's."""
    bad = start_writer("lbr-badfd", "badfd")
    try:
        how = BACKEND_ARGS[backend]
        res = cli(
            "trace", "kfunc:vfs_write", *how, "--errors-only", "--comm", "lbr-bad*", "--count", "3"
        )
        both = cli("trace", "kfunc:vfs_write", *how, "--errors-only", "--count", "3")
    finally:
        stop_writer(bad)
    keep_output(f"trace-errors-{backend}", res)
    for r in (res, both):
        assert r.returncode == 0, r.stderr
        shown = headers(r.stdout.splitlines())
        assert len(shown) == 3, r.stdout
        for m in shown:
            assert m.group("retval") == f" retval=-{errno.EBADF}", m.group(0)
            assert int(m.group("pid")) == bad.pid and " comm=lbr-badfd " in m.group(0)
    assert not leftovers()


@pytest.mark.slow
def test_doctor_in_the_guest() -> None:
    res = cli("doctor")
    keep_output("doctor", res)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    status = {
        m.group(2): m.group(1)
        for m in map(re.compile(r"\[(ok|no)\] ([A-Za-z. ]+):").match, lines)
        if m
    }
    assert status["root"] == status["BTF"] == status["fentry"] == status["tracefs"] == "ok"
    assert status["PMU"] == status["LBR"] == "no"  # TCG has no PMU
    assert lines[-1] == "=> tracing works here: backend graph"
