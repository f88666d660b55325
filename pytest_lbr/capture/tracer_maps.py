"""Spare sets of the LBR tracer's shared maps, lent from one hook set to the next.

Every `HookSet` needs the maps its tracer objects share: a 4 MiB ring buffer,
the per-CPU snapshot slots (.bss, 776 KiB), the lost counter, the armed switch,
the followed-tgid hash and the cgroup array. Creating them is most of loading a
hook: 17 of 21 ms in the 6.12 guest (TCG; with them lent, the load took 4.5 ms:
the verifier's part). A session therefore keeps a few sets whose last hook set
closed cleanly, reset, and lends them to its next hook sets (`HookSet(maps=...)`).

A set comes back only if it is as new: its ring buffer read to the end after
every link was gone, the lost counter and the armed switch reset. One that
followed forks or a cgroup (whose maps hold entries) or that was not read after
its last link went is closed instead. `close()` closes the spare sets; a set
lent out is closed when given back after that.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import c_uint32, c_uint64

from pytest_lbr.libbpf import check_int, lib

__all__ = ["SPARE_SETS", "TracerMaps"]

#: Sets a session keeps ready: a trace's own hook set and a kept program's hook
#: set may be closed together.
SPARE_SETS = 2


class TracerMaps:
    """A session's spare tracer map sets (map name key -> fd, owned here)."""

    def __init__(self, spare: int = SPARE_SETS) -> None:
        self.spare = spare
        self._free: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self._closed = False

    def lend(self) -> dict[str, int] | None:
        """A spare set, now the caller's until `give_back` (None: none spare)."""
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, fds: dict[str, int]) -> None:
        """Keep `fds` (the caller's own fds of a clean set, its ring buffer read to
        the end) for the next hook set, reset; close them when enough are spare."""
        with self._lock:
            keep = not self._closed and len(self._free) < self.spare
        if keep:
            try:
                _reset(fds)
            except OSError:
                keep = False
        if not keep:
            _close(fds)
            return
        with self._lock:
            if self._closed:
                _close(fds)
            else:
                self._free.append(fds)

    def close(self) -> None:
        """Close every spare set (idempotent); sets given back later are closed."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for fds in free:
            _close(fds)

    def __len__(self) -> int:
        return len(self._free)


def _reset(fds: dict[str, int]) -> None:
    """The counters as a new object starts them: nothing lost, armed."""
    key = c_uint32(0)
    for name, value in (("lost", c_uint64(0)), ("armed", c_uint32(1))):
        check_int(
            lib.bpf_map_update_elem(fds[name], ctypes.byref(key), ctypes.byref(value), 0),
            f"reset the tracer's {name} map",
        )


def _close(fds: dict[str, int]) -> None:
    for fd in fds.values():
        os.close(fd)
