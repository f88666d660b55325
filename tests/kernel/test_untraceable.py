"""What the LBR backend cannot trace says so in one line, in a guest (6.1 and 6.12).

A BPF program loaded without BTF cannot take fentry/fexit; a fentry/fexit
program cannot take another one (the kernel refuses the recursion). The graph
backend traces the BTF-less program all the same. And an LBR held by another
perf user (EBUSY) reaches `--lbr-require` as its one line.
"""

from __future__ import annotations

import ctypes
import os
import textwrap
from collections.abc import Iterator

import pytest

from pytest_lbr.bpf.libbpf import bpf_test_run_opts, check_int, lib, prog_info
from pytest_lbr.capture import CaptureError
from pytest_lbr.capture.hooks.hook_set import HookSet
from pytest_lbr.capture.lbr.backend import LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_target
from pytest_lbr.tracer import Tracer
from tests.commands import PYTEST_QUIET
from tests.kernel.kernel_state import bpf_ids

pytestmark = pytest.mark.kernel
pytest_plugins = ["pytester"]

_BPF_PROG_TYPE_SOCKET_FILTER = 1
_BPF_FUNC_get_prandom_u32 = 7


class _Insn(ctypes.Structure):
    """`struct bpf_insn`: the registers share one byte (dst low nibble, src high)."""

    _fields_ = [
        ("code", ctypes.c_uint8),
        ("regs", ctypes.c_uint8),
        ("off", ctypes.c_int16),
        ("imm", ctypes.c_int32),
    ]


#: call bpf_get_prandom_u32; r0 = 0; exit. The call gives the graph backend
#: something to see inside the program.
_PROGRAM = [
    _Insn(0x85, 0, 0, _BPF_FUNC_get_prandom_u32),  # BPF_JMP | BPF_CALL
    _Insn(0xB7, 0, 0, 0),  # BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
    _Insn(0x95, 0, 0, 0),  # BPF_JMP | BPF_EXIT
]


@pytest.fixture
def btfless_prog() -> Iterator[int]:
    """A socket filter loaded with bpf_prog_load() and no BTF at all; yields its id."""
    insns = (_Insn * len(_PROGRAM))(*_PROGRAM)
    fd = check_int(
        lib.bpf_prog_load(
            _BPF_PROG_TYPE_SOCKET_FILTER, b"no_btf_filter", b"GPL", insns, len(_PROGRAM), None
        ),
        "bpf_prog_load",
    )
    try:
        info, _ = prog_info(fd)
        assert info.btf_id == 0  # what this fixture is for
        yield int(info.id)
    finally:
        os.close(fd)


def _run(prog_id: int, times: int) -> None:
    fd = check_int(lib.bpf_prog_get_fd_by_id(prog_id), "bpf_prog_get_fd_by_id")
    try:
        packet = ctypes.create_string_buffer(bytes(64))  # an Ethernet frame's worth
        opts = bpf_test_run_opts(
            sz=ctypes.sizeof(bpf_test_run_opts),
            data_in=ctypes.addressof(packet),
            data_size_in=64,
            repeat=times,
        )
        check_int(lib.bpf_prog_test_run_opts(fd, ctypes.byref(opts)), "BPF_PROG_TEST_RUN")
    finally:
        os.close(fd)


def _lbr_capture(*specs: str) -> LbrCapture:
    # The guest has no PMU: software events stand in for the LBR ones (test_lifecycle.py).
    return LbrCapture(
        [parse_target(s) for s in specs], check=False, open_events=perf.software_branch_events
    )


def test_program_without_btf_is_one_line(btfless_prog: int) -> None:
    before = bpf_ids("prog"), bpf_ids("link")
    capture = _lbr_capture(f"prog:{btfless_prog}")
    with pytest.raises(CaptureError) as info:
        capture.start()
    assert str(info.value) == (
        f"prog:{btfless_prog}: the program has no BTF (built without -g, or its loader "
        "dropped it): the lbr backend cannot attach fexit to it; rebuild with -g or use "
        "--lbr-backend=graph"
    )
    assert (bpf_ids("prog"), bpf_ids("link")) == before  # nothing loaded, nothing left


@pytest.mark.slow
def test_graph_backend_traces_the_program_without_btf(btfless_prog: int) -> None:
    with Tracer(backend="graph").trace(f"prog:{btfless_prog}") as trace:
        _run(btfless_prog, 2)
    assert len(trace.hits) == 2, str(trace)
    assert all(h.tid == os.getpid() for h in trace.hits), str(trace)
    # Each run called the helper's implementation (kernel/bpf/core.c).
    assert all(Trace(hits=[h]).called("bpf_user_rnd_u32") for h in trace.hits), str(trace)
    # fexit needs the program's BTF: no return values, and the trace says why.
    assert all(h.retval is None for h in trace.hits), str(trace)
    note = f"prog:{btfless_prog}: no return values: fexit cannot attach (the program has no BTF"
    assert any(n.startswith(note) for n in trace.notes), trace.notes


def test_tracing_program_is_traced_or_refused_in_one_line() -> None:
    """fexit on a fexit program: Linux 6.1 refuses the recursion, 6.12 allows one level."""
    before = bpf_ids("prog")
    refused = ""
    with HookSet([parse_target("kfunc:vfs_write")], snapshot=True):
        (fexit_id,) = bpf_ids("prog") - before
        capture = _lbr_capture(f"prog:{fexit_id}")
        try:
            capture.start()
        except CaptureError as exc:
            refused = str(exc)
        else:
            fd = os.open("/dev/null", os.O_WRONLY)
            try:
                os.write(fd, b"abc")
                trace = capture.stop()
            finally:
                os.close(fd)
                capture.close()
    assert bpf_ids("prog") == before
    if refused:
        assert refused.startswith(
            f"prog:{fexit_id}: the program is itself a tracing (fentry/fexit) program and "
            "this kernel refuses fexit on it (Invalid argument: "
        ), refused
        assert "Cannot recursively attach" in refused
        assert refused.endswith("use --lbr-backend=graph") and "\n" not in refused
    else:
        # The hooked fexit program ran once for our write (it returns 0).
        mine = [h for h in trace.hits if h.pid == os.getpid()]
        assert [(h.target, h.retval) for h in mine] == [(f"prog:{fexit_id}", 0)], str(trace)


INNER_CONFTEST = textwrap.dedent(
    """
    import errno

    from pytest_lbr.kernel import perf

    real_open = perf.perf_event_open


    def busy(attr, pid, cpu, group_fd=-1):
        # No machine here has LBR for another user to hold: the syscall wrapper
        # answers the hardware (LBR) event with EBUSY, as x86 does when Intel PT
        # or BTS holds it; every other event opens for real.
        if attr.type == perf.PERF_TYPE_HARDWARE:
            raise OSError(errno.EBUSY, "perf_event_open: Device or resource busy")
        return real_open(attr, pid, cpu, group_fd)


    perf.perf_event_open = busy
    """
)


@pytest.mark.slow
def test_busy_lbr_reaches_lbr_require(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.lbr("kfunc:vfs_write")
        def test_marker():
            raise AssertionError("must not run")
        """
    )
    # A subprocess: this process's LBR probe is cached (no PMU) already.
    result = pytester.runpytest_subprocess(
        *PYTEST_QUIET, "--lbr", "--lbr-backend=lbr", "--lbr-require"
    )
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(errors=1)
    assert result.ret == 125, out
    lines = [ln for ln in out.splitlines() if "tracing required (--lbr-require)" in ln]
    assert lines, out
    assert (
        "tracing required (--lbr-require) but unavailable: the LBR is in use by another "
        "perf user or a hypervisor: perf_event_open(branch stack) failed with EBUSY ("
    ) in lines[0], out
