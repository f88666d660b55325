"""Shared set-up for the example suite.

Every example needs a tracing kernel as root, so each test is marked `kernel`:
on a laptop it is skipped with the reason, in the ci/qemu guests a skip is a
failure (PYTEST_LBR_STRICT). The BPF objects are built by `make -C examples`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent
#: Examples whose traces have a BPF program as target (see GRAPH_PROGRAM_SPLIT_61).
PROGRAM_TARGETS = ("xdp_filter", "tc_classifier", "cpu_stamp")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.known_bugs import GRAPH_PROGRAM_SPLIT_61

    for item in items:
        path = Path(str(item.path))
        if path.is_relative_to(EXAMPLES):
            item.add_marker(pytest.mark.kernel)
            if path.relative_to(EXAMPLES).parts[0] in PROGRAM_TARGETS:
                item.add_marker(GRAPH_PROGRAM_SPLIT_61)


@pytest.fixture
def built(request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """`built("xdp_filter")` -> the test's build/xdp_filter.bpf.o; skips if it was not built."""

    def path(name: str) -> Path:
        obj = Path(str(request.path)).parent / "build" / f"{name}.bpf.o"
        if not obj.exists():
            pytest.skip(f"{obj} not built: run `make -C examples`")
        return obj

    return path
