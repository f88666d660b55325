"""Capture engine: arm a backend on resolved targets, collect a `Trace`.

Two backends fill the same `Trace` model:

* ``lbr``   -- a BPF program at each target calls bpf_get_branch_snapshot() first
  thing and ships the records through a ring buffer (`pytest_lbr.capture.lbr`);
* ``graph`` -- the software call trace for machines without LBR
  (`pytest_lbr.capture.graph`).

`resolve_backend` probes a backend once and gives the `Backend` the tracer
opens every capture through: it keeps what a backend sets up once per session
(the graph backend's function tracer) until it is closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_lbr.capture.base import (
    BACKENDS,
    FILTERS,
    SCOPES,
    Capability,
    Capture,
    CaptureError,
    Scope,
    as_scope,
)
from pytest_lbr.targets import Target

if TYPE_CHECKING:
    from pytest_lbr.capture.graph import GraphRecorder

__all__ = [
    "BACKENDS",
    "FILTERS",
    "SCOPES",
    "Scope",
    "Backend",
    "Capability",
    "Capture",
    "CaptureError",
    "open_capture",
    "probe",
    "resolve_backend",
]


def probe(backend: str) -> Capability:
    """Probe one concrete backend ("lbr" or "graph"); never raises."""
    if backend == "lbr":
        from pytest_lbr.capture.lbr import probe_lbr

        return probe_lbr()
    if backend == "graph":
        from pytest_lbr.capture.graph import probe_graph

        return probe_graph()
    return Capability(backend, False, f"unknown backend {backend!r}; expected one of {BACKENDS}")


def resolve_backend(wanted: str) -> Backend:
    """Probe `wanted` ("auto", "lbr" or "graph") once; "auto" takes LBR where the CPU
    has it, else the graph backend. Never raises: an unusable backend says why."""
    if wanted == "auto":
        lbr = probe("lbr")
        if lbr.available:
            return Backend(lbr, wanted)
        graph = probe("graph")
        if not graph.available:
            graph.reason = f"{graph.reason} (and no LBR: {lbr.reason})"
        return Backend(graph, wanted)
    return Backend(probe(wanted), wanted)


class Backend:
    """A probed backend and what it keeps set up between traces.

    The graph backend turns the function tracer on at its first capture and
    keeps it on (recording nothing between captures) until `close()`, so a
    session pays for that once; LBR keeps nothing. Captures opened here share it.
    """

    def __init__(self, capability: Capability, requested: str | None = None) -> None:
        self.capability = capability
        #: The name it was resolved from ("auto" or the backend's own).
        self.requested = requested or capability.backend
        self._recorder: GraphRecorder | None = None

    @property
    def name(self) -> str:
        """ "lbr" or "graph" (or the unknown name asked for)."""
        return self.capability.backend

    def open(
        self,
        targets: list[Target],
        *,
        filter: str | None = None,
        scope: Scope | str | None = None,
    ) -> Capture:
        """A not-yet-armed capture of `targets` (`scope`: whose work; this process by default)."""
        if not self.capability.available:
            raise CaptureError(f"{self.name} backend unavailable: {self.capability.reason}")
        if self.name == "graph":
            from pytest_lbr.capture.graph import GraphCapture, GraphRecorder

            if self._recorder is None:
                self._recorder = GraphRecorder()
            return GraphCapture(targets, self._recorder, scope=as_scope(scope))
        return open_capture(self.name, targets, filter=filter, scope=scope)

    def close(self) -> None:
        """Release what the backend kept set up (idempotent; captures must be closed)."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.close()

    def __repr__(self) -> str:
        return f"<Backend {self.capability!r}>"


def open_capture(
    backend: str,
    targets: list[Target],
    *,
    filter: str | None = None,
    scope: Scope | str | None = None,
) -> Capture:
    """A not-yet-armed capture of `targets` on a concrete backend ("lbr" or "graph"),
    set up for this capture alone (`Backend.open` shares the set-up between captures)."""
    if backend == "lbr":
        from pytest_lbr.capture.lbr import LbrCapture

        return LbrCapture(targets, filter=filter or "any", scope=scope)
    if backend == "graph":
        from pytest_lbr.capture.graph import GraphCapture

        return GraphCapture(targets, scope=as_scope(scope))
    raise CaptureError(f"unknown backend {backend!r}; expected 'lbr' or 'graph'")
