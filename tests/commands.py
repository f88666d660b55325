"""The installed commands the tests run (`from tests.commands import PYTEST_LBR`)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["PYTEST_LBR"]

#: The installed console script (not `python -m`, which would import the checkout).
PYTEST_LBR = str(Path(sys.executable).parent / "pytest-lbr")
