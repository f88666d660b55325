"""The trace model both backends fill in, and its text.

`records.py`: locations, branches, hits, each program's helper calls. `trace.py`: the
`Trace` a test holds and its queries (`called`, `functions`, `has_path`), which work
the same on hardware LBR records and on the graph backend's call/return records.
`text.py`: a trace as a person reads it (call trees) and as branch records. Tested by
tests/test_model.py, test_names.py and tests/model/test_text.py.
"""

from __future__ import annotations

from pytest_lbr.model.records import (
    BRANCH_KINDS,
    CALL_KINDS,
    EXCEPTION_ENTRY,
    FRAME_KINDS,
    HELPER_FATES,
    KERNEL_NAME_MAX,
    UNSEEN_CALLER,
    Branch,
    HelperCall,
    Hit,
    InlineFrame,
    Location,
    ProgramCalls,
    helper_matches,
)
from pytest_lbr.model.text import format_branches, format_hit_header
from pytest_lbr.model.trace import KnownNames, PathMatch, Trace, TraceQueryError

__all__ = [
    "BRANCH_KINDS",
    "CALL_KINDS",
    "FRAME_KINDS",
    "HELPER_FATES",
    "KERNEL_NAME_MAX",
    "UNSEEN_CALLER",
    "EXCEPTION_ENTRY",
    "Branch",
    "HelperCall",
    "InlineFrame",
    "Hit",
    "KnownNames",
    "Location",
    "PathMatch",
    "ProgramCalls",
    "Trace",
    "TraceQueryError",
    "format_branches",
    "format_hit_header",
    "helper_matches",
]
