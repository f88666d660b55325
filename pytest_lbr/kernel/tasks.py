"""What /proc says about a live task."""

from __future__ import annotations

__all__ = ["live_comm", "live_tgid"]


def live_tgid(tid: int) -> int:
    """The process id of live thread `tid` (/proc/<tid>/status), 0 if it is gone."""
    try:
        with open(f"/proc/{tid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Tgid:")), 0)
    except (OSError, ValueError):
        return 0


def live_comm(tid: int) -> str:
    """The command name of live thread `tid` (/proc/<tid>/comm), "" after it exited."""
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
