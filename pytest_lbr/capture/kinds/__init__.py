"""The kinds of target, one module each behind one small interface (`TargetKind`).

What a kind knows lives in its module: which of the LBR tracer's programs hook it
and how, how the graph backend arms the function tracer for it and cuts its hits
out of the records, and which symbol its hook traced. `protocol.py` holds the
interface and what a kind is handed (`Hooking`, `GraphArming`, `HitCutting`);
`prog.py` (BPF programs), `kfunc.py` (kernel functions and globs), `tracepoint.py`
and `uprobe.py` (uprobes and uretprobes) the kinds; `KINDS` here names each once,
and `kind_of` is how the hook set and the backends ask (they keep their I/O loops,
and never switch on a target's kind). Tested by tests/capture/test_kinds.py and,
through the backends, by tests/test_ftrace_parse.py, test_user_probes.py,
test_graph_softirq.py, test_live.py and, in the guests, tests/kernel/test_graph.py
and test_hooks.py.
"""

from __future__ import annotations

from pytest_lbr.capture.kinds.kfunc import KFUNC
from pytest_lbr.capture.kinds.prog import PROG
from pytest_lbr.capture.kinds.protocol import TargetKind
from pytest_lbr.capture.kinds.tracepoint import TRACEPOINT
from pytest_lbr.capture.kinds.uprobe import UPROBE
from pytest_lbr.targets import Target

__all__ = ["KINDS", "TargetKind", "kind_of"]

#: Each kind, by the `Target.kind`s it handles.
KINDS: dict[str, TargetKind] = {
    name: kind for kind in (PROG, KFUNC, TRACEPOINT, UPROBE) for name in kind.names
}


#: A kind no module handles (a `Target` built by hand): it refuses to be hooked or armed.
_UNKNOWN = TargetKind()


def kind_of(target: Target) -> TargetKind:
    """The kind of `target`."""
    return KINDS.get(target.kind, _UNKNOWN)
