"""The guest half of bench/run: pytest runs this file inside the 6.12 guest (pytest-lbr vm).

pytest-lbr vm runs pytest, so each guest benchmark is one test here; it
calls the benchmark's `main` with the arguments bench/run left in
`bench-config.json` in the results directory (PYTEST_LBR_RESULTS) and writes
`<name>.json` beside it. On the host the tests skip: they need a guest.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Run order: the graph backend last. Removing its tracefs instance has panicked the
#: 6.12 TCG guest (int3 Oops in __schedule during instance_rmdir -> clear_ftrace_pids
#: -> static call update), which would lose every benchmark after it.
GUEST_BENCHMARKS = ("throughput", "attach", "pertest", "graph_overhead")
CONFIG_FILE = "bench-config.json"


def _results() -> Path:
    return Path(os.environ.get("PYTEST_LBR_RESULTS", "/tmp/plbr-bench"))


@pytest.mark.parametrize("name", GUEST_BENCHMARKS)
def test_guest_benchmark(name: str) -> None:
    if os.environ.get("PYTEST_LBR_GUEST") != "1":
        pytest.skip("guest benchmark: bench/run runs it inside the 6.12 guest")
    results = _results()
    try:
        config = json.loads((results / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        config = {}
    if name not in config.get("benchmarks", GUEST_BENCHMARKS):
        pytest.skip(f"{name} not selected")
    module = importlib.import_module(name)
    args = [*config.get("args", {}).get(name, []), "--out", str(results / f"{name}.json")]
    print(f"\n[bench] {name} {' '.join(args)}", flush=True)
    assert module.main(args) == 0
