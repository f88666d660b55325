"""Which guest runs a kernel test that is about our tooling, not about the kernel.

A test marked `@pytest.mark.one_kernel("6.12")` runs only in that kernel series'
guest; in the others it skips (allowed, with the reason). These are the tests whose
subject is the plugin's own bookkeeping over whole inner pytest sessions (xdist
workers, `git bisect run`, golden update workflows, crash clean-up, soak): they are
slow in a guest and a second kernel tells nothing new about them, so CI runs each in
one guest, the two guests sharing them out evenly (CI aims at 15 minutes). `PYTEST_LBR_ALL_KERNELS=1` runs them in every kernel.
"""

from __future__ import annotations

import os

import pytest

ALL_KERNELS = "PYTEST_LBR_ALL_KERNELS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "one_kernel(series): run this kernel test only in that kernel series' guest "
        f"(e.g. '6.12'); elsewhere an allowed skip unless {ALL_KERNELS}=1",
    )


def runs_here(series: str, release: str | None = None) -> bool:
    """Whether a test marked one_kernel(series) runs on this kernel `release`."""
    if os.environ.get(ALL_KERNELS) == "1":
        return True
    release = release if release is not None else os.uname().release
    return release == series or release.startswith(f"{series}.")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("one_kernel")
        if mark is None or runs_here(str(mark.args[0])):
            continue
        item.add_marker(pytest.mark.allow_skip)
        item.add_marker(
            pytest.mark.skip(
                reason=f"runs in the {mark.args[0]} guest only (CI time); "
                f"{ALL_KERNELS}=1 runs it here"
            )
        )
