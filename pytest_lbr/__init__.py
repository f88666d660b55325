"""pytest-lbr: trace the branches and calls the kernel or a BPF program took, in tests.

Public API: `Tracer` (the `lbr` fixture), the trace model (`Trace`, `Hit`,
`Branch`, `Location`) and target parsing. The pytest glue is `pytest_lbr.plugin`.
"""

from pytest_lbr.model import Branch, Hit, InlineFrame, Location, Trace
from pytest_lbr.targets import Target, TargetError
from pytest_lbr.tracer import Tracer, TracingUnavailable

__all__ = [
    "Branch",
    "Hit",
    "InlineFrame",
    "Location",
    "Target",
    "TargetError",
    "Trace",
    "Tracer",
    "TracingUnavailable",
]
__version__ = "0.1.0"
