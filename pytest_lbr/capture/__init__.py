"""Capture engine: arm a backend on resolved targets, collect a `Trace`.

Two backends fill the same `Trace` model:

* ``lbr``   -- a BPF program at each target calls bpf_get_branch_snapshot() first
  thing and ships the records through a ring buffer (`pytest_lbr.capture.lbr`);
* ``graph`` -- the software call trace for machines without LBR
  (`pytest_lbr.capture.graph`).

`open_capture` is the one entry point the tracer uses.
"""

from __future__ import annotations

from pytest_lbr.capture.base import BACKENDS, FILTERS, Capability, Capture, CaptureError
from pytest_lbr.targets import Target

__all__ = ["BACKENDS", "FILTERS", "Capability", "Capture", "CaptureError", "open_capture", "probe"]


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
