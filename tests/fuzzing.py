"""What the fuzz tests (tests/test_fuzz_*.py) share: the case budget, Hypothesis
settings, and the per-module count of cases run, printed after the module."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

__all__ = ["budget", "fuzz_settings", "report_runs"]


def budget(n: int) -> int:
    """`n` cases in CI; PYTEST_LBR_FUZZ_EXAMPLES for a longer run."""
    return int(os.environ.get("PYTEST_LBR_FUZZ_EXAMPLES") or n)


def fuzz_settings(n: int) -> settings:
    """Hypothesis settings for a fuzz test of `n` cases (see `budget`)."""
    return settings(
        max_examples=budget(n),
        deadline=None,
        database=None,  # no .hypothesis/ directory in the checkout
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def report_runs(runs: Counter[str]) -> Callable[..., Iterator[None]]:
    """A module-scoped autouse fixture printing `runs` (test name -> cases) at the end."""

    @pytest.fixture(scope="module", autouse=True)
    def _report_runs(request: pytest.FixtureRequest) -> Iterator[None]:
        yield
        # Printed past pytest's capture so the count shows without -s too.
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled():
            for name, n in sorted(runs.items()):
                print(f"\nfuzz {request.module.__name__}::{name}: {n} cases")

    return _report_runs
