"""Shared set-up of the conformance suite: BPF C written the way BPF authors write it
today (vmlinux.h, CO-RE, libbpf's SEC() names and macros), attached for real.

Every test is marked `kernel` (as examples/conftest.py does): it needs root and a
tracing kernel, so on a laptop it is skipped with the reason and in a `pytest-lbr vm`
guest a skip is a failure. The objects are built by `make -C tests/conformance`
(ci/setup runs it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "program_type(name): the BPF program type a conformance test covers; it goes "
        "into the results records (`properties`), where docs/guide.md's table is made from",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(CONFORMANCE):
            item.add_marker(pytest.mark.kernel)
        # A user property, as record_property makes, without its junit xunit2 warning.
        for mark in item.iter_markers("program_type"):
            item.user_properties.append(("program_type", str(mark.args[0])))


@pytest.fixture
def built() -> Callable[[str], Path]:
    """`built("exec_tp")` -> tests/conformance/build/exec_tp.bpf.o; skips if it was not built."""

    def path(name: str) -> Path:
        obj = CONFORMANCE / "build" / f"{name}.bpf.o"
        if not obj.exists():
            pytest.skip(f"{obj} not built: run `make -C tests/conformance`")
        return obj

    return path
