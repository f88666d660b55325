"""`TestRecord`: what one test traced, how its golden checks went, its kernel splats.

The pytest session fills it in and `--lbr-report` reads it; it lives here, not in
either of them, so the report does not depend on the session. Importing it costs
nothing: the trace model and golden results are only named for type checking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_lbr.golden.check import GoldenResult
    from pytest_lbr.kernel.kmsg import Splat
    from pytest_lbr.model import Trace

__all__ = ["TestRecord"]


@dataclass
class TestRecord:
    """What one test traced, how its golden checks went, the kernel splats it caused
    (reports read this)."""

    __test__ = False  # not a pytest test class despite the name

    nodeid: str
    outcome: str = "passed"
    #: The `lbr` fixture's `Tracer.traces` (the same list object), when it was used.
    tracer_traces: list[Trace] = field(default_factory=list)
    #: Traces passed to a golden check that did not come from the tracer.
    checked_traces: list[Trace] = field(default_factory=list)
    #: One result per golden check, in the order they ran.
    golden: list[GoldenResult] = field(default_factory=list)
    golden_names: set[str] = field(default_factory=set)
    #: Kernel splats logged while the test ran, and whether it was marked allow_splat.
    splats: list[Splat] = field(default_factory=list)
    splats_allowed: bool = False
    reported: bool = False

    @property
    def traces(self) -> list[Trace]:
        """Every trace of the test, each once, in the order taken."""
        extra = [t for t in self.checked_traces if all(t is not u for u in self.tracer_traces)]
        return [*self.tracer_traces, *extra]
