"""What every capture backend shares: filter names, the capability verdict, what a
backend can do (`Capabilities`), and the two protocols a backend implements: `Capture`
(one trace) and `BackendDriver` (one session's use of the backend). `Scope`
(`pytest_lbr.scope`) and `CaptureError` (`pytest_lbr.errors`) are named here too, as
the backends take and raise them. The backends import this, never the package itself, so
`pytest_lbr.capture` (whose registry names the backends) imports them without a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from pytest_lbr.errors import CaptureError
from pytest_lbr.model import Hit, Trace
from pytest_lbr.names import LbrFilter
from pytest_lbr.scope import LIVE_OWN_PROCESS, SCOPES, Scope, as_scope
from pytest_lbr.targets import Target

__all__ = [
    "FILTERS",
    "LIVE_OWN_PROCESS",
    "SCOPES",
    "BackendDriver",
    "Capabilities",
    "Capability",
    "Capture",
    "CaptureError",
    "Scope",
    "as_scope",
]

#: LBR branch filters (`LbrFilter`: perf_event_attr.branch_sample_type), LBR only.
FILTERS = tuple(LbrFilter)


class Capability:
    """Whether a backend can run here, and if not, exactly why; with its line of
    `pytest-lbr doctor`: what it checked (`check`), what it found (`detail`, either
    way) and, where it cannot run, the `fix`. Each backend's probe says these, so
    the doctor names no backend."""

    def __init__(
        self,
        backend: str,
        available: bool,
        reason: str = "",
        *,
        check: str = "",
        detail: str = "",
        fix: str = "",
    ) -> None:
        self.backend = backend
        self.available = available
        self.reason = reason
        self.check = check or backend
        self.detail = detail
        self.fix = fix

    def __bool__(self) -> bool:
        return self.available

    def __repr__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        return f"<Capability {self.backend} {state}>"


#: What `Capabilities.scopes` may hold: the `SCOPES`, and "pid" / "cgroup" for
#: `Scope.of(pid=...)` / `Scope.of(cgroup=...)`.
SCOPE_NEEDS = (*SCOPES, "pid", "cgroup")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, known without arming it (or probing the machine).

    Callers decide from this, never from a backend's name: the CLI refuses to
    stream with a backend whose `live` is False, the tracer passes branch
    filters only to one with `filters`, and so on.
    """

    #: The scopes it records (`SCOPE_NEEDS`): see `Scope.needs`.
    scopes: frozenset[str]
    #: `Capture.poll()` hands hits over while the capture is armed.
    live: bool
    #: The target kinds whose hits carry `retval` ("kfunc", "kfunc glob", "prog",
    #: "uretprobe").
    retval: frozenset[str]
    #: Hits say whether they ran in interrupt context (`Hit.in_interrupt`).
    in_interrupt: bool
    #: Hits carry the branches (or calls) that led to them, not only that they happened.
    branches: bool
    #: It takes an LBR branch filter (`FILTERS`).
    filters: bool = False
    #: A call's source is the call's return address (the function tracer's parent
    #: ip), not the call instruction (an LBR record's): its file:line is read from
    #: the byte before, where the call instruction ends.
    call_source_is_return: bool = False
    #: Why a feature above is missing, for the one-line refusal: (feature, why) pairs,
    #: e.g. ("live", "it decodes its hits when disarmed").
    missing: tuple[tuple[str, str], ...] = ()

    def why(self, feature: str) -> str:
        """Why `feature` ("live", "children", ...) is missing ("" when nothing says)."""
        return next((why for name, why in self.missing if name == feature), "")

    def lacks(self, scope: Scope) -> list[str]:
        """What of `scope` this backend cannot record ([] when it can)."""
        return sorted(scope.needs - self.scopes)

    def has_retval(self, target: Target) -> bool:
        """Whether `target`'s hits carry a return value on this backend."""
        return target.kind_label in self.retval


class Capture(Protocol):
    """One capture, the same for every backend.

    `start` arms; `poll` hands over the hits completed since the last poll
    (while armed; only where the backend's `Capabilities.live`); `stop` disarms
    and returns the whole trace (of a live capture: the hits not handed over
    yet); `close` releases every kernel object (idempotent, also after a failed
    start). `lost` and `notes` say, at any time, what the hits so far miss.
    `trim` drops the backend's own records from the branches of hits this
    capture returned; `pytest_lbr.tracer.finish`, the one step every trace and
    live batch goes through, calls it once their addresses are named.
    """

    def start(self) -> None: ...

    def poll(self) -> list[Hit]: ...

    def stop(self) -> Trace: ...

    def close(self) -> None: ...

    @property
    def lost(self) -> int: ...

    @property
    def notes(self) -> list[str]: ...

    def trim(self, hits: list[Hit]) -> None: ...


class BackendDriver(Protocol):
    """A backend as the registry in `pytest_lbr.capture` knows it.

    The class says what the backend can do (`capabilities`) and probes whether it
    works here (`probe`); an instance is one session's use of it, which keeps
    what the backend sets up once between captures until `close()`.
    """

    #: The name users pick it by (`--lbr-backend=NAME`).
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @classmethod
    def probe(cls) -> Capability: ...

    def prepare(self) -> None:
        """Set up now what the first capture would otherwise set up while the traced
        code runs (the graph backend's tracefs instance, made with mkdir; modules a
        capture imports): the tracer's own work, done in the traced process, which a
        user's program counting that process's calls would count (idempotent)."""
        ...

    def open(
        self,
        targets: Sequence[Target],
        *,
        scope: Scope,
        filter: str | None = None,
        live: bool = False,
    ) -> Capture: ...

    def close(self) -> None: ...
