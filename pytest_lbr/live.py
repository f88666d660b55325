"""Live tracing: hits as they arrive, for `pytest-lbr trace` (and any other reader).

    with LiveTrace(["kfunc:vfs_write"], scope=Scope.of("system")) as live:
        for batch in live.batches(done=lambda: stop_requested):
            for hit in batch:
                print(format_hit_header(hit))

`LiveTrace` arms a capture of any backend whose `Capabilities.live` says it
streams, polls it while it runs (`Capture.poll()`; the graph backend reads its
trace_pipe as the records come) and names each batch of hits the way
`pytest_lbr.tracer` finishes a whole trace (`finish`: names, then the capture's
`trim`). One rule on every backend: the reader's own threads are never recorded (a
reader that traced itself would trace its own reading), and what it starts while
armed (a child process) is, like any other task. The filters and the JSON shape of
a hit are here too, as plain functions.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, suppress
from typing import Any

from pytest_lbr.capture import (
    REGISTRY,
    Backend,
    Capabilities,
    Capture,
    CaptureError,
    Scope,
    auto_choice,
    backend_class,
    resolve_backend,
)
from pytest_lbr.kernel.tasks import live_comm
from pytest_lbr.model import Branch, Hit, Location
from pytest_lbr.names import BackendName, LbrFilter, PmuName, parse_name
from pytest_lbr.targets import Target, parse_targets
from pytest_lbr.tracer import finish

__all__ = [
    "ERRNO_MAX",
    "LiveTrace",
    "StreamingUnsupported",
    "comm_matches",
    "hit_json",
    "is_error",
    "without_return_values",
]

#: Return values from -ERRNO_MAX to -1 are errors (the kernel's MAX_ERRNO, the range
#: IS_ERR_VALUE() accepts and retsnoop reports).
ERRNO_MAX = 4095


class StreamingUnsupported(ValueError):
    """The backend asked for cannot hand hits over while it runs; the message says why."""


def is_error(retval: int | None) -> bool:
    """Whether a return value is an error: a negative errno (-4095 to -1).

    Also the same errno in the low 32 bits with the upper ones clear, as a
    function returning `int` leaves it in a 64-bit register (x86-64 zero-extends
    a 32-bit move): the graph backend's return values are the whole register,
    so -EBADF from an `int` function reads 4294967287. A pointer return of
    ERR_PTR(-E...) is the first case. No value (None) is no error.
    """
    if retval is None:
        return False
    return -ERRNO_MAX <= retval <= -1 or (1 << 32) - ERRNO_MAX <= retval <= (1 << 32) - 1


def comm_matches(hit: Hit, pattern: str) -> bool:
    """Whether the hit's task command name matches `pattern` (an fnmatch glob)."""
    return fnmatch.fnmatchcase(hit.comm, pattern)


def without_return_values(targets: Sequence[Target], capabilities: Capabilities) -> list[Target]:
    """The targets whose hits never carry a return value on a backend that can do
    `capabilities`: tracepoints, uprobe entries and, on the graph backend,
    kernel-function globs (a return event per function would cost a kprobe each)."""
    return [t for t in targets if not capabilities.has_retval(t)]


def _location_json(loc: Location) -> dict[str, Any]:
    return {
        "addr": f"{loc.addr:#x}",
        "symbol": loc.symbol,
        "offset": loc.offset,
        "file": loc.file,
        "line": loc.line,
        "inlined": [{"function": f.function, "file": f.file, "line": f.line} for f in loc.inlined],
    }


def _branch_json(b: Branch) -> dict[str, Any]:
    return {"src": _location_json(b.src), "dst": _location_json(b.dst), "kind": b.kind}


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit as one JSON object (`pytest-lbr trace --json` prints one per line).

    Addresses are hex strings (a kernel address does not fit a JSON reader's
    double); a location's symbol, file and line are null where unknown.
    """
    return {
        "target": hit.target,
        "cpu": hit.cpu,
        "pid": hit.pid,
        "tid": hit.tid,
        "comm": hit.comm,
        "in_interrupt": hit.in_interrupt,
        "retval": hit.retval,
        "timestamp_ns": hit.timestamp_ns,
        "branches": [_branch_json(b) for b in hit.branches],
    }


class LiveTrace:
    """A capture that hands its hits over as they arrive; a context manager.

    `targets` as `lbr.trace` takes them; `scope` whose work (default: every task,
    "system"; never this process's threads, while the processes it starts are
    recorded). `backend` "auto" streams with the first backend
    that streams and works here; a backend whose `Capabilities.live` is False is
    refused (`StreamingUnsupported`). `filter`: an LBR branch filter, for a backend
    that takes one (`Capabilities.filters`). `backend`, `pmu` and `filter` are
    checked here (`BackendName`, `PmuName`, `LbrFilter`: a ValueError names the
    accepted values).
    `vmlinux`: the debug vmlinux for file:line (None: auto-discovered).
    `interval`: seconds between polls.
    """

    def __init__(
        self,
        targets: Sequence[Any],
        *,
        backend: str = "auto",
        vmlinux: str | None = None,
        scope: Scope | None = None,
        interval: float = 0.1,
        filter: str | None = None,
        pmu: str = "hardware",
    ) -> None:
        backend = parse_name(BackendName, backend)
        pmu = parse_name(PmuName, pmu)
        if filter is not None:
            filter = parse_name(LbrFilter, filter)
        if backend != "auto":
            backend_class(backend, pmu)  # ValueError: a backend that does not run on pmu
        #: The PMU the backend runs on (`--pmu`).
        self.pmu = pmu
        if backend != "auto" and not backend_class(backend).capabilities.live:
            streams = [n for n in REGISTRY if backend_class(n).capabilities.live]
            why = backend_class(backend).capabilities.why("live")
            raise StreamingUnsupported(
                f"the {backend} backend cannot stream yet"
                + (f": {why}" if why else "")
                + f"; use --backend {' or '.join(streams)}"
            )
        self.targets = parse_targets(list(targets))
        self.scope = scope or Scope.of("system")
        self.interval = interval
        self._wanted = backend
        self._filter = filter
        self._vmlinux = vmlinux
        self._backend: Backend | None = None
        self._capture: Capture | None = None
        self._stopped = False
        # (lost, notes) of the capture when it ended: still true after close().
        self._end: tuple[int, list[str]] | None = None

    # -- what a reader asks ------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The backend, probed on first use."""
        if self._backend is None:
            from pytest_lbr.bpf.libbpf import libbpf_messages

            with ExitStack() as quiet:
                # The probe's reason says why a backend cannot run; libbpf's chatter
                # would not. Without libbpf there is no chatter (the LBR probe says so).
                try:
                    quiet.enter_context(libbpf_messages())
                except OSError:
                    pass
                self._backend = resolve_backend(self._wanted, live=True, pmu=self.pmu)
        return self._backend

    @property
    def backend_name(self) -> str:
        """The backend's name: without probing where only one backend could stream."""
        if self._wanted != "auto":
            return self._wanted
        return auto_choice(live=True, pmu=self.pmu) or self.backend.name

    @property
    def capabilities(self) -> Capabilities:
        """What the backend can do (`backend_name`'s, without arming it)."""
        return backend_class(self.backend_name, self.pmu).capabilities

    @property
    def available(self) -> bool:
        return self.backend.capability.available

    @property
    def reason(self) -> str:
        return self.backend.capability.reason

    @property
    def lost(self) -> int:
        """Records lost so far (ring buffers overran); after `stop()` or `close()`,
        all the trace lost."""
        if self._end is not None:
            return self._end[0]
        return self._capture.lost if self._capture is not None else 0

    @property
    def notes(self) -> list[str]:
        """Why the hits may be incomplete (e.g. no return values for a program)."""
        if self._end is not None:
            return list(self._end[1])
        return self._capture.notes if self._capture is not None else []

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        """Arm: every hit from now on is handed over by `poll()` or `stop()`."""
        from pytest_lbr.symbols import get_symbolizer

        # Read the kernel's symbols before arming, not at the first batch: that
        # reads all of /proc/kallsyms, and a reader stalled that long while
        # the machine runs falls behind, and its ring buffers may overrun.
        get_symbolizer(self._vmlinux)
        chosen = self._filter if self.capabilities.filters else None
        self._capture = capture = self.backend.open(
            self.targets, scope=self.scope, filter=chosen, live=True
        )
        try:
            capture.start()
        except BaseException:
            self.close()
            raise

    def poll(self) -> list[Hit]:
        """The hits completed since the last poll, named, oldest first."""
        if self._capture is None:
            raise CaptureError("LiveTrace.poll() before start()")
        return self._named(self._capture.poll())

    def stop(self) -> list[Hit]:
        """Disarm and hand over the hits not handed over yet (unfinished ones too)."""
        if self._capture is None or self._stopped:
            return []
        self._stopped = True
        trace = self._capture.stop()
        self._end = (trace.lost, list(trace.notes))
        return self._named(trace.hits)

    def batches(self, done: Callable[[], bool]) -> Iterator[list[Hit]]:
        """A batch of hits per poll (often empty) until `done()`, then the rest."""
        while not done():
            started = time.monotonic()
            yield self.poll()
            pause = self.interval - (time.monotonic() - started)
            if pause > 0 and not done():
                time.sleep(pause)
        yield self.stop()

    def close(self) -> None:
        """Release every kernel object (idempotent)."""
        capture, self._capture = self._capture, None
        backend, self._backend = self._backend, None
        try:
            if capture is not None:
                if self._end is None:
                    with suppress(OSError, CaptureError):  # going away anyway
                        self._end = (capture.lost, capture.notes)
                capture.close()
        finally:
            if backend is not None:
                backend.close()

    def __enter__(self) -> LiveTrace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------

    def _named(self, hits: list[Hit]) -> list[Hit]:
        mine = os.getpid()
        hits = [h for h in hits if h.pid != mine]
        if self._capture is not None:
            finish(self._capture, hits, self._vmlinux, self.capabilities)
        for h in hits:
            # ftrace names a task it has not cached as "<...>".
            if not h.comm or h.comm == "<...>":
                h.comm = live_comm(h.tid) or h.comm
        return hits
