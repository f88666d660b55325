"""Spare sets of the LBR tracer's large shared maps, lent from one hook set to the next.

Every `HookSet` needs the maps its tracer objects share: a 4 MiB ring buffer,
the per-CPU snapshot slots (.bss, 776 KiB), the followed-tgid hash, the lost
counter, the armed switch and the cgroup array. Creating the large ones was
most of loading a hook: 17 of 21 ms in the 6.12 guest (TCG; with them lent, the
load took 4.5 ms: the verifier's part). A session therefore keeps a few sets
whose last hook set closed cleanly and lends them to its next hook sets
(`HookSet(maps=...)`). Only the `POOLED` maps are kept: reusing a map costs
libbpf's `bpf_map__reuse_fd()`, which opens "/" to reserve an fd number (about
1 ms on the guests' 9p root), more than creating a one-entry map. So each hook
set's first object makes its own lost counter, armed switch and cgroup array,
new as the set starts: nothing to reset.

A set comes back only if it is as new: its ring buffer read to the end after
every link was gone, its tgid hash empty (a set that followed forks is closed
instead, see `HookSet._clean_maps`). `close()` closes the spare sets; a set
lent out is closed when given back after that.
"""

from __future__ import annotations

import os
import threading

__all__ = ["POOLED", "SPARE_SETS", "TracerMaps"]

#: Sets a session keeps ready: a trace's own hook set and a kept program's hook
#: set may be closed together.
SPARE_SETS = 2

#: The keys (`HookSet`'s names for the shared maps) of the maps a spare set holds.
POOLED = ("ringbuf", "bss", "tgids")


class TracerMaps:
    """A session's spare tracer map sets (`POOLED` key -> fd, owned here)."""

    def __init__(self, spare: int = SPARE_SETS) -> None:
        self.spare = spare
        self._free: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self._closed = False

    def lend(self) -> dict[str, int] | None:
        """A spare set, now the caller's until `give_back` or `discard` (None: none spare)."""
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, fds: dict[str, int]) -> None:
        """Keep `fds` (the caller's own fds of a clean set: its ring buffer read to
        the end, its tgid hash empty) for the next hook set; close them when
        enough are spare."""
        with self._lock:
            keep = not self._closed and len(self._free) < self.spare
            if keep:
                self._free.append(fds)
        if not keep:
            self.discard(fds)

    @staticmethod
    def discard(fds: dict[str, int]) -> None:
        """Close a set that may not serve again (lent, or the caller's own fds)."""
        for fd in fds.values():
            os.close(fd)

    def close(self) -> None:
        """Close every spare set (idempotent); sets given back later are closed."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for fds in free:
            self.discard(fds)

    def __len__(self) -> int:
        return len(self._free)
