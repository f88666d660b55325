"""Coverage of BPF programs' C source lines, from traces (`pytest --lbr --lbr-cov`).

A program's translated instructions give its control-flow graph and dominators
(`cfg`); its line records tie JIT addresses to instructions and source lines
(`code`, read from the kernel by `program` while it is loaded). Each run of a
program (a hit) shows lines by what its backend can prove (`evidence`): LBR
records show lines *executed* and branch directions taken, within the window
they reach back over; a call site the function tracer recorded, and the entry of
every run, *prove* their blocks and every block dominating them. The rest is
"not observed", never "not run". `book` sums runs per program (name and source
file, never an id) across tests, xdist workers, shards and kernels; `formats`
writes pytest-cov's term-missing table, LCOV and Cobertura XML, and `html` the HTML
report's section; `collect` is the one entry point a session uses
(`CoverageCollector`). Tested by tests/test_coverage.py (the real JIT of
examples/branch_cover on the host, LBR records built from its addresses) and
test_vm_coverage.py.
"""

from __future__ import annotations

__all__ = ["CoverageCollector"]


def __getattr__(name: str) -> object:
    if name == "CoverageCollector":
        from pytest_lbr.coverage.collect import CoverageCollector

        return CoverageCollector
    raise AttributeError(name)
