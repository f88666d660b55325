"""`Tracer`: the object behind the `lbr` fixture, usable without pytest too.

tracer = Tracer(backend="auto")
with tracer.trace("kfunc:vfs_write") as trace:
    os.write(fd, b"x")
assert trace.called("write_null")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pytest_lbr.capture import BACKENDS, FILTERS, Capability, CaptureError, open_capture, probe
from pytest_lbr.model import Trace
from pytest_lbr.targets import parse_targets

__all__ = ["Tracer", "TracingUnavailable"]


class TracingUnavailable(CaptureError):
    """The chosen backend cannot run on this machine; `reason` says why."""


class Tracer:
    """Arms tracing around a block and hands back a fully collected `Trace`."""

    def __init__(self, backend: str = "auto", filter: str | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        check_filter(filter)
        self._wanted = backend
        self._filter = filter
        self._capability: Capability | None = None
        #: Every trace taken through this tracer, in order (reports read them).
        self.traces: list[Trace] = []
        #: Set by the pytest plugin: compares a trace with the test's golden file.
        self.golden_checker: Callable[..., None] | None = None

    # -- what the contract exposes --------------------------------------------

    @property
    def backend(self) -> str:
        """The backend in use: "lbr" or "graph" ("auto" resolved on this machine)."""
        return self._resolve().backend

    @property
    def available(self) -> bool:
        """True if the backend can trace on this machine."""
        return self._resolve().available

    @property
    def reason(self) -> str:
        """Why tracing is unavailable ("" when it is available)."""
        return self._resolve().reason

    @contextmanager
    def trace(
        self, *targets: Any, backend: str | None = None, filter: str | None = None
    ) -> Iterator[Trace]:
        """Arm on `targets` for the duration of the block, yield the `Trace`.

        The trace is empty inside the block and complete after it; every kernel
        object is released on exit, whatever happened inside.
        """
        parsed = parse_targets(targets)
        check_filter(filter)
        cap = self._resolve() if backend is None else self._probe_one(backend)
        if not cap.available:
            raise TracingUnavailable(f"{cap.backend} backend unavailable: {cap.reason}")
        chosen_filter = filter or self._filter
        if chosen_filter and cap.backend != "lbr":
            chosen_filter = None  # branch filters are an LBR feature; graph records calls
        capture = open_capture(cap.backend, parsed, filter=chosen_filter)
        trace = Trace(targets=[t.spec for t in parsed], backend=cap.backend)
        self.traces.append(trace)
        try:
            capture.start()
            yield trace
            done = capture.stop()
            trace.__dict__.update(done.__dict__)
            trace.targets = [t.spec for t in parsed]
        finally:
            capture.close()

    def check_golden(self, trace: Trace, name: str | None = None, level: str = "function") -> None:
        """Compare `trace` with the test's golden trace (or write it under --lbr-golden-update)."""
        if self.golden_checker is None:
            raise RuntimeError("check_golden needs the pytest plugin (use the `lbr` fixture)")
        self.golden_checker(trace, name=name, level=level)

    # -- internals --------------------------------------------------------------

    def _resolve(self) -> Capability:
        if self._capability is None:
            self._capability = self._probe_one(self._wanted)
        return self._capability

    @staticmethod
    def _probe_one(backend: str) -> Capability:
        if backend == "auto":
            lbr = probe("lbr")
            if lbr.available:
                return lbr
            graph = probe("graph")
            if not graph.available:
                graph.reason = f"{graph.reason} (and no LBR: {lbr.reason})"
            return graph
        if backend not in BACKENDS:
            return Capability(backend, False, f"unknown backend {backend!r}")
        return probe(backend)


def check_filter(filter: str | None) -> None:
    """Raise ValueError naming the accepted values for an unknown LBR filter."""
    if filter is not None and filter not in FILTERS:
        raise ValueError(f"unknown LBR filter {filter!r}; expected one of {','.join(FILTERS)}")
