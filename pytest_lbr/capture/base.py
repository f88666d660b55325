"""What every capture backend shares: backend and filter names, the error type,
the capability verdict and the `Capture` protocol. The backends import this, never
the package itself, so `pytest_lbr.capture` (which picks a backend) imports them
without a cycle.
"""

from __future__ import annotations

from typing import Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.model import Trace

__all__ = ["BACKENDS", "FILTERS", "SCOPES", "Capability", "Capture", "CaptureError"]

#: Backend names a user can ask for.
BACKENDS = ("auto", "lbr", "graph")
#: LBR branch filters (perf_event_attr.branch_sample_type), LBR only.
#: Whose work a trace records: this process's threads, or also every process
#: they start while the trace is armed (and those processes' children).
SCOPES = ("process", "children")
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
