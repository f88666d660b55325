"""The one way library code reports progress: silent unless a front end listens.

Slow steps (reading a vmlinux's DWARF, fetching a debug package) call
`progress("...")`. Library code never prints: the pytest session routes these
lines to pytest's terminal reporter, the `pytest-lbr` command to stderr, and
anyone else hears nothing.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ProgressCallback", "progress", "set_progress"]

ProgressCallback = Callable[[str], None]

_callback: ProgressCallback | None = None


def set_progress(callback: ProgressCallback | None) -> ProgressCallback | None:
    """Send `progress()` lines to `callback` (None: silence); returns the previous
    one, for the front end to put back when it is done (pytester nests sessions)."""
    global _callback
    previous, _callback = _callback, callback
    return previous


def progress(message: str) -> None:
    """Report one line of progress (no "pytest-lbr:" prefix: the front end adds its own)."""
    callback = _callback
    if callback is not None:
        callback(message)
