"""Root conftest: only what is specific to this repository.

The `kernel` / `allow_skip` markers and strict guest mode belong to the plugin
(pytest_lbr/guest.py). Here: the header says which pytest_lbr the suite runs
against, since CI tests the installed wheel, not this checkout's sources.
"""

from __future__ import annotations

import pytest_lbr


def pytest_report_header() -> str:
    return f"pytest_lbr under test: {pytest_lbr.__file__}"
