"""pytest glue: options, markers, fixtures and hooks (filled in by issue 5)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lbr", "LBR branch tracing (pytest-lbr)")
    group.addoption("--lbr", action="store_true", dest="lbr", default=False,
                    help="enable branch tracing for tests that use the lbr fixture or marker")
