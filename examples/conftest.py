"""Shared set-up for the example suite.

Every example needs a tracing kernel as root, so each test is marked `kernel`:
on a laptop it is skipped with the reason, in a `pytest-lbr vm` guest a skip is
a failure (the plugin's strict guest mode). The BPF objects are built by `make -C examples`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(EXAMPLES):
            item.add_marker(pytest.mark.kernel)


@pytest.fixture
def built(request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """`built("xdp_filter")` -> the test's build/xdp_filter.bpf.o; skips if it was not built."""

    def path(name: str) -> Path:
        obj = Path(str(request.path)).parent / "build" / f"{name}.bpf.o"
        if not obj.exists():
            pytest.skip(f"{obj} not built: run `make -C examples`")
        return obj

    return path
