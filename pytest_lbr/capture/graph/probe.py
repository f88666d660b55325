"""Whether the graph backend works here (`probe_graph`), and what it can do
(`GRAPH_CAPABILITIES`): both known before a capture is armed."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pytest_lbr.capture.base import Capabilities, Capability
from pytest_lbr.kernel.tracefs import (
    TRACEFS_MOUNT_COMMAND,
    TRACEFS_NOT_MOUNTED,
    Instance,
    TracefsError,
    cleanup_stale_instances,
    find_tracefs,
)

__all__ = ["GRAPH_CAPABILITIES", "probe_graph"]


#: The doctor's fix where the function tracer cannot run here.
_IN_A_GUEST = (
    "the graph backend needs the ftrace function tracer as root: run in a guest "
    "(pytest-lbr vm --kernel 6.12)"
)


def _cannot(reason: str, fix: str = _IN_A_GUEST) -> Capability:
    return Capability("graph", False, reason, check="tracefs", fix=fix)


def probe_graph() -> Capability:
    """Whether the function tracer can run in a private instance here, and if not why
    (with the doctor's fix)."""
    if os.geteuid() != 0:
        return _cannot("the graph backend needs root (ftrace); run as root")
    root = find_tracefs()
    if root is None:
        return _cannot(
            TRACEFS_NOT_MOUNTED,
            f"pytest-lbr doctor --mount mounts it (or, as root: {TRACEFS_MOUNT_COMMAND})",
        )
    if not (root / "instances").is_dir():
        return _cannot(f"tracefs at {root} has no instances/ (kernel too old)")
    try:
        cleanup_stale_instances(root)
        inst = Instance(root, buffer_kb=4)
    except OSError as exc:
        return _cannot(f"cannot create a tracefs instance: {exc}")
    try:
        tracers = inst.read("available_tracers").split()
        if "function" not in tracers:
            return _cannot(f"the ftrace function tracer is not available (tracers: {tracers})")
        # One function is enough to learn whether the tracer is allowed; all of
        # them would patch every call site in the kernel twice for nothing.
        inst.write("set_ftrace_filter", _probe_function(root))
        inst.write("current_tracer", "function")
    except OSError as exc:
        return _cannot(f"the ftrace function tracer is refused: {exc}")
    finally:
        inst.close()
    return Capability(
        "graph", True, check="tracefs", detail="function tracer works in a private tracefs instance"
    )


def _probe_function(root: Path) -> str:
    with open(root / "available_filter_functions") as f:
        first = f.readline().split()
    if not first:
        raise TracefsError(errno.ENOENT, "available_filter_functions is empty")
    return first[0]


#: What the graph backend can do: every scope, streaming (`GraphCapture.poll()`),
#: return values of single kernel functions (kretprobe), programs (fexit) and
#: uretprobes (not of kfunc globs: a return event per function would cost a kprobe
#: each), interrupt context; calls as branches (from their return addresses), and
#: no LBR branch filters.
GRAPH_CAPABILITIES = Capabilities(
    scopes=frozenset({"process", "children", "system", "pid", "cgroup"}),
    live=True,
    retval=frozenset({"kfunc", "prog", "uretprobe"}),
    in_interrupt=True,
    branches=True,
    filters=False,
    call_source_is_return=True,
)
