"""The exit statuses of `pytest-lbr` and its one usage error (shared by its commands)."""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "UsageError"]

#: 1: `diff` found the traces differ (as diff(1) does); any other command could not do
#: what was asked (no tracing here, a target that cannot be traced). `pytest-lbr
#: bisect` has its own codes (`bisect.driver`: 0 when it found the commit).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake on the command line or in an input file: one line, exit 2."""
