"""`pytest-lbr selftest`: prove, on the machine it runs on, what the LBR path does.

One line per check, pass / fail / not available with the reason, and a bundle
(JSON + text) to attach to an issue. Split by job: `verdicts` (plain functions
from records to results, host-testable), `facts` (what the machine says about
itself), `program` (the test program built from bpf/lbr_selftest.bpf.c, and its
helper calls), `run` (the live run and the bundle), `compare` (two report
directories, LBR vs graph). Tested by tests/test_selftest.py and, in the guests, by
tests/kernel/test_selftest_kernel.py.
"""

from __future__ import annotations

from pytest_lbr.selftest.run import BUNDLE_JSON, BUNDLE_TEXT, Bundle, run_selftest, write_bundle
from pytest_lbr.selftest.verdicts import FAIL, NOT_AVAILABLE, PASS, Result

__all__ = [
    "BUNDLE_JSON",
    "BUNDLE_TEXT",
    "FAIL",
    "NOT_AVAILABLE",
    "PASS",
    "Bundle",
    "Result",
    "run_selftest",
    "write_bundle",
]
