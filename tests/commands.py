"""The installed commands the tests run, and how (`from tests.commands import PYTEST_LBR`)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["PYTEST_LBR", "PYTEST_QUIET"]

#: The installed console script (not `python -m`, which would import the checkout).
PYTEST_LBR = str(Path(sys.executable).parent / "pytest-lbr")

#: Options for the pytest sessions tests start: no cache files in the suite's
#: directory, and no Hypothesis plugin, which imports all of Hypothesis at each
#: session's end (slow in a guest) though these sessions run no property tests.
PYTEST_QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
