"""Known, open bugs that tests mark as xfail (non-strict), each with its reason.

A marked test still runs: an XPASS shows the bug did not bite this time.
"""

from __future__ import annotations

import platform

import pytest

#: The graph backend sometimes splits one BPF program run into two hits on the
#: Debian 6.1 guest (one vCPU, TCG), letting the BPF_PROG_TEST_RUN machinery into
#: the second (issue #3 note). Seen intermittently in 1-2 of ~15 program traces a run.
GRAPH_PROGRAM_SPLIT_61 = pytest.mark.xfail(
    platform.release().startswith("6.1."),
    strict=False,
    reason="known bug on 6.1 (issue #3 note): the graph backend may split one BPF program "
    "run into two hits and let the test-run machinery into the second",
)
