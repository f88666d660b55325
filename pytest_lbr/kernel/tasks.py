"""What /proc says about a live task."""

from __future__ import annotations

__all__ = ["live_tgid"]


def live_tgid(tid: int) -> int:
    """The process id of live thread `tid` (/proc/<tid>/status), 0 if it is gone."""
    try:
        with open(f"/proc/{tid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Tgid:")), 0)
    except (OSError, ValueError):
        return 0
