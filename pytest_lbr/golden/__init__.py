"""Golden traces: the reviewable `.lbr` files a trace is compared with.

A golden file lives beside the test module::

    tests/__lbr_golden__/test_net/test_connect.lbr         default
    tests/__lbr_golden__/test_net/test_connect@6.12.lbr    wins on 6.12.x kernels

and reads like this (addresses never appear, so KASLR and JIT placement don't matter)::

    # pytest-lbr golden trace
    # format: 1
    # kernel: 6.12.117+deb12-amd64
    # arch: x86_64
    # backend: graph
    # level: function
    hit kfunc:vfs_write
    vfs_write -> rw_verify_area
    vfs_write -> write_null

One job per module, in the order a check uses them:

- `normalize`: a `Trace` -> its edge lines (noise dropped, repetitions folded);
- `format`: the file's header, `serialize` and `parse`;
- `storage`: where the file of a test is, its series variants, atomic writes;
- `compare`: golden lines vs this run's, first divergence, diff;
- `check`: the whole workflow for one trace (`GoldenCheck` -> `GoldenResult`);
- `unused`: golden files no test used in a session.

Tested by tests/test_golden.py, test_golden_concurrency.py and test_fuzz_golden.py.
"""

from __future__ import annotations

from pytest_lbr.golden.check import GoldenCheck, GoldenResult
from pytest_lbr.golden.compare import Comparison, compare
from pytest_lbr.golden.format import (
    FORMAT_VERSION,
    LEVELS,
    GoldenError,
    GoldenFile,
    parse,
    serialize,
)
from pytest_lbr.golden.normalize import Normalization, normalize
from pytest_lbr.golden.storage import GOLDEN_DIR, golden_path, kernel_series, write_atomic
from pytest_lbr.noise import DEFAULT_EXCLUDE

__all__ = [
    "DEFAULT_EXCLUDE",
    "FORMAT_VERSION",
    "GOLDEN_DIR",
    "LEVELS",
    "Comparison",
    "GoldenCheck",
    "GoldenError",
    "GoldenFile",
    "GoldenResult",
    "Normalization",
    "compare",
    "golden_path",
    "kernel_series",
    "normalize",
    "parse",
    "serialize",
    "write_atomic",
]
