"""What every capture backend shares: backend and filter names, the error type,
the capability verdict and the `Capture` protocol. The backends import this, never
the package itself, so `pytest_lbr.capture` (which picks a backend) imports them
without a cycle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_lbr.errors import UserError
from pytest_lbr.model import Trace

__all__ = [
    "BACKENDS",
    "FILTERS",
    "SCOPES",
    "Capability",
    "Capture",
    "CaptureError",
    "Scope",
    "as_scope",
]

#: Backend names a user can ask for.
BACKENDS = ("auto", "lbr", "graph")
#: Whose work a trace records: this process's threads ("process"), also every
#: process they start while the trace is armed and those processes' children
#: ("children"), or every task and interrupt context of the machine ("system").
#: `pid=` and `cgroup=` (see `Scope`) choose another process or a cgroup instead.
SCOPES = ("process", "children", "system")
#: LBR branch filters (perf_event_attr.branch_sample_type), LBR only.
FILTERS = ("any", "any_call", "any_return", "call", "ind_call", "cond", "call_stack", "ind_jump")


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
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")
        if pid is not None and cgroup is not None:
            raise ValueError("pid= and cgroup= choose whose work is traced: give one of them")
        if scope == "system" and (pid is not None or cgroup is not None):
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
        return cls(scope, pid, cgroup)

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
        return self.kind


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


class Capture(Protocol):
    """One armed capture. `start` arms, `stop` disarms and returns the whole trace,
    `close` releases every kernel object (idempotent, also after a failed start)."""

    def start(self) -> None: ...

    def stop(self) -> Trace: ...

    def close(self) -> None: ...
