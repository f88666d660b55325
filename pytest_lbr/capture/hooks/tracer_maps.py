"""Spare sets of the LBR tracer's large shared maps, lent from one hook set to the next.

Every `HookSet` needs the maps its tracer objects share: a 4 MiB ring buffer,
the per-CPU snapshot slots (.bss, 776 KiB), the followed-tgid hash, the lost
counter, the armed switch and the cgroup array. Creating the large ones was
most of loading a hook (with them lent, what is left is mostly the verifier's
part). A session therefore keeps a few sets
whose last hook set closed cleanly and lends them to its next hook sets
(`HookSet(maps=...)`), with the reader of their ring buffer (`RingReader`: libbpf's
`ring_buffer__new` maps the ring into this process, and unmapping it is as
dear). Only the `POOLED` maps are kept: reusing a map costs
libbpf's `bpf_map__reuse_fd()`, which opens "/" to reserve an fd number (a round
trip to the host on the guests' 9p root), more than creating a one-entry map. So each hook
set's first object makes its own lost counter, armed switch and cgroup array,
new as the set starts: nothing to reset.

A set comes back only if it is as new: its ring buffer read to the end after
every link was gone, its tgid hash empty (a set that followed forks is closed
instead, see `HookSet._clean_maps`). `close()` closes the spare sets; a set
lent out is closed when given back after that. A spare set keeps its ring mapped
(twice, for wrap-around: up to 8 MiB of RSS once its pages were read).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from ctypes import CFUNCTYPE, c_int, c_size_t, c_void_p
from dataclasses import dataclass

from pytest_lbr.bpf.libbpf import BpfError, check_int, lib

__all__ = ["POOLED", "SPARE_SETS", "MapSet", "RingReader", "TracerMaps"]

#: Sets a session keeps ready: a trace's own hook set and a kept program's hook
#: set may be closed together.
SPARE_SETS = 2

#: The keys (`HookSet`'s names for the shared maps) of the maps a spare set holds.
POOLED = ("ringbuf", "bss", "tgids")

_SAMPLE_CB = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)


class RingReader:
    """libbpf's reader of the tracer's ring buffer (map fd `fd`): each record read
    is appended to `records`, as bytes, for whoever reads the ring now."""

    def __init__(self, fd: int) -> None:
        self.records: list[bytes] = []

        def on_sample(_ctx: int | None, data: int, size: int) -> int:
            self.records.append(ctypes.string_at(data, size))
            return 0

        self._cb = _SAMPLE_CB(on_sample)  # libbpf calls it until `close`
        rb = lib.ring_buffer__new(fd, self._cb, None, None)
        if not rb:
            raise BpfError(ctypes.get_errno() or errno.EINVAL, "ring_buffer__new")
        self._rb: int | None = rb

    def poll(self, timeout_ms: int) -> None:
        """Read what arrived, waiting up to `timeout_ms` for the first record."""
        if self._rb is not None:  # libbpf would follow a freed pointer
            check_int(lib.ring_buffer__poll(self._rb, timeout_ms), "ring_buffer__poll")

    def consume(self) -> None:
        """Read everything the ring holds now."""
        while self._rb is not None and (
            check_int(lib.ring_buffer__consume(self._rb), "ring_buffer__consume") > 0
        ):
            pass

    def close(self) -> None:
        """Unmap the ring (idempotent); the map lives on while an fd holds it."""
        rb, self._rb = self._rb, None
        if rb is not None:
            lib.ring_buffer__free(rb)


@dataclass
class MapSet:
    """A spare set: `POOLED` key -> fd (owned) and the reader of its ring."""

    fds: dict[str, int]
    ring: RingReader


class TracerMaps:
    """A session's spare tracer map sets (owned here until lent)."""

    def __init__(self, spare: int = SPARE_SETS) -> None:
        self.spare = spare
        self._free: list[MapSet] = []
        self._lock = threading.Lock()
        self._closed = False

    def lend(self) -> MapSet | None:
        """A spare set, now the caller's until `give_back` or `discard` (None: none spare)."""
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, spare: MapSet) -> None:
        """Keep `spare` (the caller's, clean: its ring read to the end, its tgid
        hash empty) for the next hook set; close it when enough are spare."""
        with self._lock:
            keep = not self._closed and len(self._free) < self.spare
            if keep:
                self._free.append(spare)
        if not keep:
            self.discard(spare)

    @staticmethod
    def discard(spare: MapSet) -> None:
        """Close a set that may not serve again (lent, or the caller's own)."""
        spare.ring.close()
        for fd in spare.fds.values():
            os.close(fd)

    def close(self) -> None:
        """Close every spare set (idempotent); sets given back later are closed."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for spare in free:
            self.discard(spare)

    def __len__(self) -> int:
        return len(self._free)
