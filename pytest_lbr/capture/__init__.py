"""Capture engine: arm a backend on resolved targets, collect a `Trace`.

Two backends fill the same `Trace` model:

* ``lbr``   -- a BPF program at each target calls bpf_get_branch_snapshot() first
  thing and ships the records through a ring buffer (`pytest_lbr.capture.lbr`);
* ``graph`` -- the software call trace for machines without LBR
  (`pytest_lbr.capture.graph`).

`open_capture` is the one entry point the tracer uses.
"""

from __future__ import annotations

from typing import Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.model import Trace
from pytest_lbr.targets import Target

__all__ = ["BACKENDS", "FILTERS", "Capability", "Capture", "CaptureError", "open_capture", "probe"]

#: Backend names a user can ask for.
BACKENDS = ("auto", "lbr", "graph")
#: LBR branch filters (perf_event_attr.branch_sample_type), LBR only.
FILTERS = ("any", "any_call", "any_return", "call", "ind_call", "cond", "call_stack", "ind_jump")


class CaptureError(UserError, RuntimeError):
    """Tracing could not be armed or collected; the message says why in one line."""


class Capability:
    """Whether a backend can run here, and if not, exactly why."""

    def __init__(self, backend: str, available: bool, reason: str = "") -> None:
        self.backend = backend
        self.available = available
        self.reason = reason

    def __bool__(self) -> bool:
        return self.available

    def __repr__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        return f"<Capability {self.backend} {state}>"


class Capture(Protocol):
    """One armed capture. `start` arms, `stop` disarms and returns the whole trace,
    `close` releases every kernel object (idempotent, also after a failed start)."""

    def start(self) -> None: ...

    def stop(self) -> Trace: ...

    def close(self) -> None: ...


def probe(backend: str) -> Capability:
    """Probe one concrete backend ("lbr" or "graph"); never raises."""
    if backend == "lbr":
        from pytest_lbr.capture.lbr import probe_lbr

        return probe_lbr()
    if backend == "graph":
        from pytest_lbr.capture.graph import probe_graph

        return probe_graph()
    return Capability(backend, False, f"unknown backend {backend!r}; expected one of {BACKENDS}")


def open_capture(backend: str, targets: list[Target], *, filter: str | None = None) -> Capture:
    """A not-yet-armed capture of `targets` on a concrete backend ("lbr" or "graph")."""
    if backend == "lbr":
        from pytest_lbr.capture.lbr import LbrCapture

        return LbrCapture(targets, filter=filter or "any")
    if backend == "graph":
        from pytest_lbr.capture.graph import GraphCapture

        return GraphCapture(targets)
    raise CaptureError(f"unknown backend {backend!r}; expected 'lbr' or 'graph'")
