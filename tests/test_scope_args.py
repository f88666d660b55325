"""Scope arguments are checked before anything is armed: one line each, on any machine."""

from __future__ import annotations

import os

import pytest

from pytest_lbr.capture import SCOPES, Scope
from pytest_lbr.tracer import Tracer


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"scope": "everything"},
            "unknown scope 'everything'; expected one of process, children, system",
        ),
        ({"pid": 1, "cgroup": "/sys/fs/cgroup"}, "give one of them"),
        ({"scope": "system", "pid": 1}, "drop pid= / cgroup="),
        ({"pid": 0}, "pid must be a positive process id, not 0"),
        ({"pid": True}, "pid must be a positive process id"),
        ({"pid": 2**22 + 7}, "no such process"),
        ({"cgroup": "/nonexistent/cg"}, "not a cgroup v2 directory"),
    ],
)
def test_bad_scope_is_one_line_before_arming(kwargs: dict, message: str) -> None:
    # "graph" is unavailable on the host: the scope is refused before the backend is asked.
    with pytest.raises(ValueError, match=message) as info:
        with Tracer(backend="graph").trace("kfunc:vfs_write", **kwargs):
            pass
    assert "\n" not in str(info.value)


def test_scope_values() -> None:
    assert SCOPES == ("process", "children", "system")
    assert Scope.of() == Scope("process")
    assert Scope.of(pid=os.getpid()).tids() == {int(t) for t in os.listdir("/proc/self/task")}
    assert Scope.of("system").tids() == set() and Scope.of("system").interrupts
    assert not Scope.of("children").interrupts
    assert str(Scope.of("children", pid=1)) == "pid 1 and its children"


def test_tracer_default_scope_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        Tracer(scope="world")
