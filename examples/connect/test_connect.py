"""A TCP connect on loopback, seen from the kernel: a kernel-function trace
around the syscall, and a tracepoint program that counts connects."""

import os
import socket
import struct
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from pytest_lbr.assertions import why_false


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    # Never accepted: the backlog holds every connect of a test, the per-CPU warm-ups
    # of settled_tcp included (a full accept queue drops the SYN: the connect times out).
    srv.listen(len(os.sched_getaffinity(0)) + 4)
    with closing(srv):
        yield srv.getsockname()


def connect(addr) -> None:
    with closing(socket.create_connection(addr, timeout=5)):
        pass


def test_connect_goes_through_tcp_v4_connect(listener, lbr):
    with lbr.trace("kfunc:tcp_v4_connect") as trace:
        connect(listener)

    assert len(trace.hits) == 1, [
        (h.pid, h.tid, h.timestamp_ns, len(h.branches), h.branches[:2]) for h in trace.hits
    ]
    assert trace.hits[0].retval == 0
    # The socket layer hands the connect to TCP, which routes it and sends the SYN.
    assert trace.has_path("__inet_stream_connect", "tcp_v4_connect", "tcp_connect")
    assert trace.called("ip_route_output_key_hash*", by="*")


def test_a_failed_query_shows_the_calls_around_it(listener, lbr):
    with lbr.trace("kfunc:tcp_v4_connect") as trace:
        connect(listener)

    # What a failed `assert trace.called("tcp_connect", by=...)` shows under its
    # traceback: tcp_connect was called, by tcp_v4_connect, not by the route lookup.
    text = why_false(trace, "called", "tcp_connect", by="ip_route_output_key_hash*")
    assert text is not None
    assert "tcp_connect was called, but by: tcp_v4_connect" in text, text
    # Then, of a call tree of hundreds of lines, the 40 around the route lookup:
    # the calls that lead to it first, the lines left out counted.
    assert len(str(trace).splitlines()) > 100, str(trace)
    tree = text[text.index("Hit at kfunc:tcp_v4_connect") :].splitlines()[1:]
    assert tree[-1].startswith("(the whole trace:"), text
    # The root is where the records begin (tcp_v4_connect's caller), the return value
    # is tcp_v4_connect's.
    assert len(tree) - 1 <= 40 and tree[1].split()[:3] == ["tcp_v4_connect", "=", "0"], text
    assert any(line.lstrip().startswith("ip_route_output_key_hash") for line in tree), text
    assert any(line.lstrip().startswith("\u2026 ") for line in tree), text


@pytest.fixture
def whole_body_trace(lbr):
    """Asserts on the marker's trace once it is complete: it is empty while the body runs."""
    yield
    assert lbr.traces[0].has_path("__sys_connect", "tcp_v4_connect")


@pytest.fixture
def settled_tcp(listener):
    """The same kernel state for the traced connect whatever ran before it.

    TCP keeps metrics per destination from earlier connections: whether the connect
    finds an entry for 127.0.0.1 (`__tcp_get_metrics -> addr_same`) depends on what
    earlier tests left behind. Start with none and save none while the test runs
    (needs iproute2's `ip`). Then an untraced connect does the first-use work a
    fresh boot would otherwise do inside the trace (the route cache entry, the
    ephemeral-port secret), once on each CPU: the output route is cached per CPU
    (`nhc_pcpu_rth_output`), and the arm64 6.12 guest once traced a connect that
    allocated its route (`rt_dst_alloc`) on a CPU the warm-up had not run on."""
    knob = Path("/proc/sys/net/ipv4/tcp_no_metrics_save")
    old = knob.read_text()
    knob.write_text("1\n")
    try:
        subprocess.run(["ip", "tcp_metrics", "flush", "all"], check=True, capture_output=True)
        cpus = os.sched_getaffinity(0)
        try:
            for cpu in sorted(cpus):
                os.sched_setaffinity(0, {cpu})
                connect(listener)
        finally:
            os.sched_setaffinity(0, cpus)
        yield
    finally:
        knob.write_text(old)


# The marker form: the whole test body is traced, the golden check runs after it.
# The kernel refills its batched random numbers (get_random_u32 -> crng_*) every so
# many calls: that is not the connect path under test, so it stays out of the golden.
@pytest.mark.lbr(
    "kfunc:__sys_connect",
    golden=True,
    exclude=("get_random_*", "_get_random_bytes", "crng_*", "chacha_*"),
)
def test_connect_syscall(listener, whole_body_trace, settled_tcp):
    connect(listener)


@pytest.fixture
def connect_counter(bpf, built):
    """The tracepoint program, loaded and attached to syscalls/sys_enter_connect."""
    obj = bpf.load(built("connect_count"))
    # Attached where its SEC("tracepoint/syscalls/sys_enter_connect") says.
    with obj.programs["count_connect"].attach():
        yield obj


def test_tracepoint_program_counts_connects(connect_counter, listener, lbr):
    prog = connect_counter.programs["count_connect"]

    with lbr.trace(prog) as trace:
        connect(listener)
        connect(listener)

    value = connect_counter.maps["connects"].lookup(os.getpid())
    assert value is not None and struct.unpack("<Q", value)[0] == 2
    assert len(trace.hits) == 2  # one run per connect()
    first, second = trace.hits
    calls = lambda hit: [b.dst.symbol for b in hit.branches if b.kind == "call"]  # noqa: E731
    # The first connect inserts the process's counter, the second finds it.
    assert "htab_map_update_elem" in calls(first)
    assert "htab_map_update_elem" not in calls(second)
    assert trace.called("bpf_get_current_pid_tgid", by="count_connect")
