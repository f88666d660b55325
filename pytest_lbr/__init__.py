"""pytest-lbr: trace the branches and calls the kernel or a BPF program took, in tests.

Public API: `Tracer` (the `lbr` fixture), the trace model (`Trace`, `Hit`,
`Branch`, `Location`) and target parsing. The pytest glue is `pytest_lbr.plugin`.
Names are imported on first use, so loading the plugin without --lbr stays cheap.

Tested by tests/test_plugin.py (these lazy names) and, for the modules here without a
test of their name: tests/test_capture_protocol.py,
test_scope_args.py and tests/kernel/test_lifecycle.py (`tracer.py`, the `Tracer`);
tests/programs/test_helper_calls.py and tests/conformance/test_reasons.py
(`assertions.py`, explained failures); tests/test_user_errors.py and test_bad_input.py
(`errors.py`); test_ftrace_parse.py and test_lbr_decode.py (`noise.py`, what is not code
under test).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_lbr.model import Branch, Hit, InlineFrame, Location, Trace, TraceQueryError
    from pytest_lbr.targets import Target, TargetError
    from pytest_lbr.tracer import Tracer, TracingUnavailable

_WHERE = {
    "Branch": "model",
    "Hit": "model",
    "InlineFrame": "model",
    "Location": "model",
    "Trace": "model",
    "TraceQueryError": "model",
    "Target": "targets",
    "TargetError": "targets",
    "Tracer": "tracer",
    "TracingUnavailable": "tracer",
}
__all__ = [
    "Branch",
    "Hit",
    "InlineFrame",
    "Location",
    "Target",
    "TargetError",
    "Trace",
    "TraceQueryError",
    "Tracer",
    "TracingUnavailable",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'pytest_lbr' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pytest_lbr.{_WHERE[name]}"), name)
