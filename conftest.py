"""Root conftest: tests marked `kernel` run only inside the ci/qemu guests.

On the host they are skipped with the reason. Inside a guest (the runner sets
PYTEST_LBR_GUEST=1) a kernel test that skips for any reason is turned into a
failure when PYTEST_LBR_STRICT=1, so a broken guest can never pass quietly
(drgn's vmtest does the same).
"""

from __future__ import annotations

import os

import pytest

IN_GUEST = os.environ.get("PYTEST_LBR_GUEST") == "1"
STRICT = os.environ.get("PYTEST_LBR_STRICT") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IN_GUEST:
        return
    skip = pytest.mark.skip(
        reason="kernel test: needs a tracing kernel as root; runs in the guests (ci/qemu/run)"
    )
    for item in items:
        if item.get_closest_marker("kernel"):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    xfailed = hasattr(report, "wasxfail")  # a known, documented failure, not a skip
    if IN_GUEST and STRICT and report.skipped and not xfailed and item.get_closest_marker("kernel"):
        if item.get_closest_marker("allow_skip") is None:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            report.outcome = "failed"
            report.longrepr = (
                f"kernel test skipped inside the guest (PYTEST_LBR_STRICT=1): {reason}"
            )
