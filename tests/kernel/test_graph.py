"""The graph backend in a guest: real ftrace records, real BPF test runs."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.capture.graph.backend import probe_graph
from pytest_lbr.kernel.functions import filter_functions_text
from pytest_lbr.kernel.tracefs import Instance, find_tracefs
from pytest_lbr.model import Trace
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import (
    XDP_DROP,
    XDP_HELPERS_DROP_BYTE,
    XDP_PASS,
    bpf_object,
)

pytestmark = pytest.mark.kernel


def _tracefs_state() -> dict[str, str]:
    """What a trace must leave exactly as it found it."""
    root = find_tracefs()
    assert root is not None
    state = {"instances": " ".join(sorted(os.listdir(root / "instances")))}
    for name in (
        "kprobe_events",
        "uprobe_events",
        "set_ftrace_filter",
        "current_tracer",
        "set_ftrace_pid",
    ):
        path = Path(root / name)
        state[name] = path.read_text() if path.exists() else "<absent>"
    return state


@pytest.fixture(scope="module")
def graph() -> Iterator[Tracer]:
    """One graph tracer for the module's tests of what a trace holds, as a session
    keeps it: turning the function tracer on and off patches every call site. The
    tests of the tracer's own lifecycle below make their own."""
    before = _tracefs_state()
    with Tracer(backend="graph") as tracer:
        with tracer.trace("tp:syscalls/sys_enter_getppid"):  # its instance, set up
            os.getppid()
        yield tracer
    assert _tracefs_state() == before


@pytest.fixture
def xdp_helpers():
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        yield obj.programs["xdp_helpers"]


def test_probe_available() -> None:
    cap = probe_graph()
    assert cap.available, cap.reason


def test_bpf_program_helpers(graph: Tracer, xdp_helpers) -> None:
    before = _tracefs_state()
    with graph.trace(xdp_helpers) as trace:
        res = xdp_helpers.run(data=bytes(range(1, 65)))
    assert res.retval == 2  # XDP_PASS
    assert _tracefs_state() == before
    assert len(trace.hits) == 1, str(trace)
    assert trace.called("bpf_csum_diff", by="xdp_helpers"), str(trace)
    assert trace.called("bpf_xdp_adjust_head", by="xdp_helpers"), str(trace)
    assert trace.called("__htab_map_lookup_elem", by="xdp_helpers"), str(trace)
    _assert_only_the_program(trace)
    assert trace.lost == 0


#: What BPF_PROG_TEST_RUN does around the program (seen in the 6.1 and 6.12 guests).
MACHINERY = ("bpf_test_*", "bpf_prog_test_run*", "bpf_cgroup_storage_*", "bpf_ctx_*", "kfree")


def _assert_only_the_program(trace) -> None:
    """Each hit is one run: the program's calls, nested ones, and their returns."""
    for hit in trace.hits:
        for b in hit.branches:
            for loc in (b.src, b.dst):
                assert not any(fnmatch.fnmatchcase(loc.symbol or "", m) for m in MACHINERY), (
                    f"{b} is the test-run machinery\n{trace}"
                )
        # The program's last call (before XDP_PASS) returned last.
        last = hit.branches[-1]
        assert (last.kind, last.src.symbol) == ("ret", "bpf_xdp_adjust_head"), str(trace)
        assert hit.branches[0].kind == "call", str(trace)


@pytest.mark.parametrize(("runs", "repeat"), [(1, 1), (2, 1), (1, 3)])
def test_one_hit_per_run(graph: Tracer, xdp_helpers, runs: int, repeat: int) -> None:
    with graph.trace(xdp_helpers) as trace:
        for i in range(runs):
            xdp_helpers.run(data=bytes(range(1 + i, 65 + i)), repeat=repeat)
    assert len(trace.hits) == runs * repeat, str(trace)
    assert all(h.tid == os.getpid() for h in trace.hits)
    assert all(Trace(hits=[h]).called("bpf_csum_diff") for h in trace.hits), str(trace)
    _assert_only_the_program(trace)


def test_program_runs_carry_their_return_values(graph: Tracer, xdp_helpers) -> None:
    """A program target's runs get retval from a fexit hook (the function tracer
    never sees a JITed program return), as on the LBR backend."""
    drop = bytes([XDP_HELPERS_DROP_BYTE]) + bytes(63)
    with graph.trace(xdp_helpers) as trace:
        verdicts = [xdp_helpers.run(data=d).retval for d in (bytes(range(1, 65)), drop)]
    assert verdicts == [XDP_PASS, XDP_DROP]
    assert [h.retval for h in trace.hits] == verdicts, str(trace)
    assert not any("return values" in n for n in trace.notes), trace.notes
    # The fexit hook's own records (trampoline, tracer program) are not the program's.
    for hit in trace.hits:
        assert not any(
            (loc.symbol or "").startswith(("__bpf_prog_", "bpf_trampoline_", "bpf_ringbuf"))
            for b in hit.raw_branches
            for loc in (b.src, b.dst)
        ), str(trace)


def test_program_that_calls_nothing_is_one_hit_per_run(graph: Tracer) -> None:
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_pass_with_a_long_name"]
        with graph.trace(prog) as trace:
            prog.run(data=bytes(64), repeat=2)
    assert [(h.retval, h.branches) for h in trace.hits] == [(XDP_PASS, [])] * 2, str(trace)


def test_lru_update_shows_the_bucket_lock_called_by_the_update(graph: Tracer) -> None:
    """htab_lock_bucket is notrace: its frame sits under the update, never under the
    spin_unlock that the function tracer saw last, and its caller is the update,
    whose code calls it (read from kernel text)."""
    with BpfLoader().load(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_lru"]
        with graph.trace(prog) as trace:
            prog.run(data=(7).to_bytes(4, "little") + bytes(60))
    assert len(trace.hits) == 1 and trace.hits[0].retval == XDP_PASS, str(trace)
    hit = trace.hits[0]
    stack: list[str] = []
    parent_of_lock = None
    for b in hit.branches:
        if b.kind in ("call", "unseen"):
            name = b.dst.symbol or "?"
            if name == "_raw_spin_lock":
                parent_of_lock = stack[-1]
            stack.append(f"{name} (unseen)" if b.kind == "unseen" else name)
        elif b.kind == "ret":
            stack.pop()
    assert parent_of_lock == "htab_lock_bucket", str(trace)
    assert trace.called("_raw_spin_lock", by="htab_lock_bucket"), str(trace)
    assert trace.called("htab_lock_bucket", by="htab_lru_map_update_elem"), str(trace)
    assert "(unseen caller) -> htab_lock_bucket" not in trace.edges()
    assert trace.has_path("xdp_lru", "htab_lru_map_update_elem", "prealloc_lru_pop"), str(trace)


def test_kfunc_vfs_write_path_and_retval(graph: Tracer) -> None:
    before = _tracefs_state()
    with graph.trace("kfunc:vfs_write") as trace:
        fd = os.open("/dev/null", os.O_WRONLY)
        try:
            os.write(fd, b"abc")
        finally:
            os.close(fd)
    assert _tracefs_state() == before
    assert len(trace.hits) == 1, str(trace)
    assert trace.has_path("vfs_write", "write_null"), str(trace)
    assert trace.called("write_null", by="vfs_write")
    assert trace.hits[0].retval == 3
    # The kretprobe's own handlers are kept out of the trace.
    assert not trace.called("*rethook*") and not trace.called("kprobe_ftrace_handler"), str(trace)


def test_tracepoint_hits(graph: Tracer) -> None:
    with graph.trace("tp:syscalls/sys_enter_getppid") as trace:
        os.getppid()
        os.getppid()
    assert len(trace.hits) == 2, str(trace)


@pytest.mark.slow
def test_state_restored_after_failure_and_interrupt(xdp_helpers) -> None:
    before = _tracefs_state()
    with Tracer(backend="graph") as tracer:
        with pytest.raises(AssertionError):
            with tracer.trace("kfunc:vfs_write"):
                raise AssertionError("test body failed")
        assert _tracefs_state()["kprobe_events"] == before["kprobe_events"]
        with pytest.raises(KeyboardInterrupt):
            with tracer.trace(xdp_helpers):
                raise KeyboardInterrupt
    assert _tracefs_state() == before


@pytest.mark.slow
def test_function_tracer_armed_once_per_tracer() -> None:
    """The instance and its function tracer outlive a trace; each trace's probes do not;
    closing the tracer removes everything."""
    before = _tracefs_state()
    root = find_tracefs()
    assert root is not None
    with Tracer(backend="graph") as tracer:
        seen = []
        for n in (1, 2):
            with tracer.trace("kfunc:vfs_write") as trace:
                fd = os.open("/dev/null", os.O_WRONLY)
                os.write(fd, b"x" * n)
                os.close(fd)
            assert [h.retval for h in trace.hits] == [n], str(trace)
            during = _tracefs_state()
            assert during["kprobe_events"] == before["kprobe_events"]
            ours = set(during["instances"].split()) - set(before["instances"].split())
            assert len(ours) == 1, during["instances"]
            seen.append(ours.pop())
            instance = root / "instances" / seen[-1]
            assert (instance / "current_tracer").read_text().strip() == "function"
            # Disarmed: recording on no CPU (tracing_on stays 1 after the first arm).
            mask = (instance / "tracing_cpumask").read_text().strip()
            assert int(mask.replace(",", ""), 16) == 0, mask
        assert seen[0] == seen[1]
    assert _tracefs_state() == before


def test_unknown_function_is_an_error(graph: Tracer) -> None:
    before = _tracefs_state()
    with pytest.raises(Exception, match="no traceable kernel function"):
        with graph.trace("kfunc:no_such_function_xyz"):
            pass
    assert _tracefs_state() == before


TOUCH_C = r"""
#include <fcntl.h>
#include <unistd.h>

/* Opens, writes one byte to and closes a file: three syscalls to trace. */
__attribute__((noinline)) int touch(const char *path)
{
	int fd = open(path, O_WRONLY);
	int n;

	if (fd < 0)
		return -1;
	n = write(fd, "x", 1);
	close(fd);
	return n;
}

int main(void)
{
	return touch("/dev/null") == 1 ? 0 : 1;
}
"""


@pytest.fixture
def touch_binary(tmp_path: Path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src, out = tmp_path / "touch.c", tmp_path / "touch"
    src.write_text(TOUCH_C)
    subprocess.run(["gcc", "-O1", "-o", str(out), str(src)], check=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["process", "children"])
def test_children_scope_records_a_child_process_kernel_calls(
    graph: Tracer, touch_binary, scope: str
) -> None:
    """A uretprobe hit in a child holds the child's kernel calls only when the
    trace follows children; the user-level edge and retval are there either way.
    (On the module's tracer: its fixture checks that closing it restores tracefs.)"""
    with graph.trace(f"uretprobe:{touch_binary}:touch", scope=scope) as trace:
        subprocess.run([str(touch_binary)], check=True)
    # The next trace of the session follows this process only again.
    with graph.trace("kfunc:vfs_write") as after:
        subprocess.run([str(touch_binary)], check=True)
    assert len(trace.hits) == 1, str(trace)
    hit = trace.hits[0]
    assert hit.retval == 1 and hit.pid != os.getpid(), str(trace)
    assert hit.branches[-1].kind == "ret" and hit.branches[-1].src.symbol == "touch"
    one = Trace(hits=[hit])
    if scope == "children":
        assert one.called("write_null"), str(trace)
        assert one.has_path("vfs_write", "write_null"), str(trace)
    else:
        assert not any(b.kind == "call" for b in hit.branches), str(trace)
    assert after.hits == [], str(after)


def test_unknown_scope_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown scope 'everything'; expected one of"):
        with Tracer(backend="graph").trace("kfunc:vfs_write", scope="everything"):
            pass


def test_function_filter_is_set_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """A narrowed trace's functions go into set_ftrace_filter by their line numbers in
    available_filter_functions (by name, ftrace compares each with every function),
    and the kernel's list is exactly those functions."""
    root = find_tracefs()
    assert root is not None
    listing = filter_functions_text(root)
    names = ["vfs_write", "vfs_read", "ksys_write", "write_null"]
    inst = Instance(root, 64)
    try:
        # The slow path (names) would go through Instance.write: it must not be needed.
        monkeypatch.setattr(inst, "write", lambda *a: pytest.fail(f"fell back to names: {a}"))
        inst.set_function_filter(names, listing)
        assert set(inst.read("set_ftrace_filter").split()) == set(names), inst.read(
            "set_ftrace_filter"
        )
    finally:
        inst.close()


@contextlib.contextmanager
def _small_vfs_write_instance() -> Iterator[tuple[Instance, int]]:
    """An instance recording this process's vfs_write calls in a page or so per CPU
    (2,000 writes overrun it), and an fd of /dev/null to write to."""
    root = find_tracefs()
    assert root is not None
    inst = Instance(root, 4)
    fd = os.open("/dev/null", os.O_WRONLY)
    try:
        inst.set_function_filter(["vfs_write"], filter_functions_text(root))
        inst.set_pids([os.getpid()])
        inst.write("current_tracer", "function")
        yield inst, fd
    finally:
        os.close(fd)
        inst.close()


def _overrun(inst: Instance, fd: int) -> None:
    inst.arm()
    for _ in range(2000):
        os.write(fd, b"x")
    inst.disarm()


def test_a_trace_read_from_the_pipe_rearms_without_emptying_the_buffer() -> None:
    """After the first arm, arming switches tracing_cpumask (no RCU grace period): a
    trace read with `read_pipe` leaves nothing behind, nothing is recorded while
    disarmed, and losses count from the arm."""
    with _small_vfs_write_instance() as (inst, fd):
        _overrun(inst, fd)
        assert inst.lost() > 0
        inst.read_pipe(None)
        assert inst.unread() == 0
        for _ in range(5):
            os.write(fd, b"x")  # disarmed: not recorded
        assert inst.unread() == 0
        inst.arm()
        for _ in range(3):
            os.write(fd, b"x")
        inst.disarm()
        text = inst.read_pipe(None)
        # The overruns of the first trace are still counted by the kernel (no reset)...
        assert inst._counts()[1] > 0
        # ...but not as this trace's: three writes, and the disarming write(2)'s own.
        assert inst.lost() == 0
        assert 3 <= text.count("vfs_write") <= 4, text


def test_arming_empties_the_buffer_and_its_loss_counts() -> None:
    """A graph trace does not clear the buffer before arming (each clear waits for an
    RCU grace period): the first arm (tracing_on to 1) empties it,
    with its overrun counters, as the function tracer's start() does, and a later
    arm empties what a trace left unread."""
    with _small_vfs_write_instance() as (inst, fd):
        _overrun(inst, fd)
        assert inst.unread() > 10 and inst.lost() > 0, (inst.unread(), inst.lost())
        inst.arm()
        inst.disarm()
        # At most the disarming write(2)'s own vfs_write is left.
        assert inst.unread() <= 1 and inst.lost() == 0, inst.read("trace")
