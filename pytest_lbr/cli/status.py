"""The usage error `pytest-lbr`'s commands share (exit `exit_codes.EXIT_USAGE`)."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A mistake on the command line or in an input file: one line, exit 2."""
