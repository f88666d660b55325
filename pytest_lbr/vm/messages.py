"""What `pytest-lbr vm` prints about itself, and its one error.

Guests run side by side in threads: every line the runner prints (its own `[vm]`
lines and the guests' echoed output) goes through one lock, so no two interleave.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["PRINT_LOCK", "VmError", "say"]

#: Held while a line goes to the terminal.
PRINT_LOCK = threading.Lock()


class VmError(RuntimeError):
    """The VM could not be set up or did not report back; the message says why."""


def say(message: str) -> None:
    """One `[vm] ...` line on stderr."""
    with PRINT_LOCK:
        print(f"[vm] {message}", file=sys.stderr, flush=True)
