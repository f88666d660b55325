"""Whose work a trace records: `Scope` (a process and its threads, what it starts,
a cgroup, or the whole machine), checked where a user names it.

A capture backend records the threads `Scope.tids` names (and, for "children", the
processes they start; for a cgroup or "system", interrupt context). The lbr and graph
backends both take a `Scope`; `Capabilities.scopes` says which ones a backend offers.
Tested by tests/test_scope_args.py and, in the guests, tests/kernel/test_scope.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pytest_lbr.errors import CaptureError
from pytest_lbr.names import ScopeKind, parse_name

__all__ = ["CGROUP_ROOT", "LIVE_OWN_PROCESS", "SCOPES", "Scope", "as_scope"]

#: Whose work a trace records (`ScopeKind`): this process's threads ("process"), also
#: every process they start while the trace is armed and those processes' children
#: ("children"), or every task and interrupt context of the machine ("system").
#: `pid=` and `cgroup=` (see `Scope`) choose another process or a cgroup instead.
SCOPES = tuple(ScopeKind)

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
