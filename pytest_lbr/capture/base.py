"""What every capture backend shares: filter and scope names, the error type, the
capability verdict, what a backend can do (`Capabilities`), and the two protocols a
backend implements: `Capture` (one trace) and `BackendDriver` (one session's use of
the backend). The backends import this, never the package itself, so
`pytest_lbr.capture` (whose registry names the backends) imports them without a cycle.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.model import Hit, Trace
from pytest_lbr.names import LbrFilter, ScopeKind, parse_name
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

#: Whose work a trace records (`ScopeKind`): this process's threads ("process"), also
#: every process they start while the trace is armed and those processes' children
#: ("children"), or every task and interrupt context of the machine ("system").
#: `pid=` and `cgroup=` (see `Scope`) choose another process or a cgroup instead.
SCOPES = tuple(ScopeKind)
#: LBR branch filters (`LbrFilter`: perf_event_attr.branch_sample_type), LBR only.
FILTERS = tuple(LbrFilter)


class CaptureError(UserError, RuntimeError):
    """Tracing could not be armed or collected; the message says why in one line."""


#: Where cgroup v2 is mounted on systemd and Debian machines (relative paths start here).
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Scope:
    """Whose work a capture records: `kind` is one of `SCOPES`; `pid` replaces this
    process by another one (its threads; with "children" also what it starts);
    `cgroup` records every task in that cgroup v2 directory, and interrupt context.

    Built by `Scope.of`, which checks the combination and that the process or
    cgroup exists, so a typo fails at arming with one line, not with an empty trace.
    """

    kind: str = "process"
    pid: int | None = None
    #: Absolute path of the cgroup's directory.
    cgroup: str | None = None

    @classmethod
    def of(cls, scope: str = "process", pid: int | None = None, cgroup: str | None = None) -> Scope:
        """Check and build a scope (ValueError with the accepted values otherwise)."""
        kind = parse_name(ScopeKind, scope)
        if pid is not None and cgroup is not None:
            raise ValueError("pid= and cgroup= choose whose work is traced: give one of them")
        if kind == "system" and (pid is not None or cgroup is not None):
            raise ValueError('scope="system" traces every task: drop pid= / cgroup=')
        if pid is not None:
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                raise ValueError(f"pid must be a positive process id, not {pid!r}")
            if not os.path.isdir(f"/proc/{pid}/task"):
                raise ValueError(f"pid={pid}: no such process")
        if cgroup is not None:
            path = Path(cgroup)
            if not path.is_absolute():
                path = CGROUP_ROOT / path
            if not (path / "cgroup.threads").is_file():
                raise ValueError(
                    f"cgroup={cgroup!r}: not a cgroup v2 directory (no {path / 'cgroup.threads'})"
                )
            cgroup = str(path)
        return cls(kind, pid, cgroup)

    @property
    def needs(self) -> frozenset[str]:
        """What a backend must offer for this scope (`Capabilities.scopes`): its kind,
        and "pid" or "cgroup" where it names another process or a cgroup."""
        return frozenset(
            {self.kind}
            | ({"pid"} if self.pid is not None else set())
            | ({"cgroup"} if self.cgroup is not None else set())
        )

    @property
    def is_this_process(self) -> bool:
        """Whether the scope records this process (which a live reader must not: it
        would record its own reading of the trace)."""
        return self.kind != "system" and self.cgroup is None and self.pid in (None, os.getpid())

    @property
    def interrupts(self) -> bool:
        """Whether work done in interrupt context (hardirq, softirq: NAPI, XDP) is kept."""
        return self.kind == "system" or self.cgroup is not None

    def tids(self) -> set[int]:
        """The threads to record at arming (empty for "system": everyone)."""
        if self.kind == "system":
            return set()
        if self.cgroup is not None:
            return _cgroup_threads(self.cgroup)
        return _threads(self.pid if self.pid is not None else os.getpid())

    def __str__(self) -> str:
        if self.cgroup is not None:
            return f"cgroup {self.cgroup}"
        if self.pid is not None:
            return f"pid {self.pid}" + (" and its children" if self.kind == "children" else "")
        return str(self.kind)  # a plain str, not the `ScopeKind` member


#: Why a live capture refuses a scope that records its own process.
LIVE_OWN_PROCESS = (
    "a live trace cannot record its own process (it would record its own "
    "reading of the trace): trace another pid, a cgroup or the system"
)


def as_scope(scope: Scope | str | None) -> Scope:
    """A `Scope` from a scope name (checked), or the default (this process) for None."""
    if isinstance(scope, Scope):
        return scope
    return Scope.of(scope or "process")


def _threads(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except FileNotFoundError:
        raise CaptureError(f"pid {pid} exited before the trace was armed") from None


def _cgroup_threads(path: str) -> set[int]:
    try:
        text = Path(path, "cgroup.threads").read_text()
    except OSError as exc:
        raise CaptureError(f"cgroup {path}: {exc.strerror}") from None
    return {int(t) for t in text.split()}


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
        kind = f"{target.kind} glob" if target.kind == "kfunc" and target.is_glob else target.kind
        return kind in self.retval


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

    def open(
        self,
        targets: Sequence[Target],
        *,
        scope: Scope,
        filter: str | None = None,
        live: bool = False,
    ) -> Capture: ...

    def close(self) -> None: ...
