"""What the fuzz tests (tests/test_fuzz_*.py) share: the case budget, Hypothesis
settings, and the count of cases each test ran, printed in the terminal summary."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

__all__ = ["FUZZ_CASES", "budget", "fuzz_settings", "report_runs"]

#: The user property a fuzz test's report carries: how many cases it ran.
FUZZ_CASES = "fuzz_cases"


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
    """An autouse fixture recording `runs` (test name -> cases) on each fuzz test's
    report as the user property "fuzz_cases": the root conftest prints them in the
    terminal summary, also from pytest-xdist workers (whose output is not shown)."""

    @pytest.fixture(autouse=True)
    def _report_runs(request: pytest.FixtureRequest) -> Iterator[None]:
        yield
        name = request.node.originalname
        if name in runs:
            request.node.user_properties.append((FUZZ_CASES, runs[name]))

    return _report_runs
