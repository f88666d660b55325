"""The hook set's job of reading: hits from the shared ring buffer, the kernel's
count of hits it dropped, and the armed switch every hook of the set reads."""

from __future__ import annotations

import ctypes
from ctypes import c_uint32, c_uint64

from pytest_lbr.bpf.libbpf import (
    check_int,
    lib,
)
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.records import RawHit, decode_record
from pytest_lbr.capture.hooks.state import HookState
from pytest_lbr.capture.hooks.tracer_maps import RingReader
from pytest_lbr.capture.hooks.tracer_object import (
    tracer_layout,
)

__all__ = ["RingReading"]


class RingReading(HookState):
    """Reading what the set's hooks wrote (`HookSet`'s third job)."""

    # -- reading hits --------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[RawHit]:
        """Hits that arrived so far (waits up to `timeout_ms` for the first)."""
        if self._ring is None:
            return []
        self._ring.poll(timeout_ms)
        return self._take()

    def drain(self) -> list[RawHit]:
        """Every hit still in the ring buffer."""
        if self._ring is None:
            return []
        self._ring.consume()
        return self._take()

    @property
    def lost(self) -> int:
        """Hits the kernel dropped because the ring buffer was full."""
        fd = self._shared.get("lost")
        if fd is None:
            return 0
        val = c_uint64()
        key = c_uint32(0)
        check_int(lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(val)), "read lost")
        return val.value

    def set_armed(self, armed: bool) -> None:
        """Switch every hook of the set on or off, attached all the while (the
        tracer's ``lbr_armed``; a set is armed from `attach`)."""
        fd = self._shared.get("armed")
        if fd is None:
            raise CaptureError("the hooks are not attached")
        key, val = c_uint32(0), c_uint32(int(armed))
        check_int(
            lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(val), 0),
            "arm the tracer" if armed else "disarm the tracer",
        )

    def _take(self) -> list[RawHit]:
        assert self._ring is not None
        records, self._ring.records = self._ring.records, []
        layout = tracer_layout(self._object)
        return [decode_record(r, layout) for r in records]

    def _open_ringbuf(self) -> None:
        if self._ring is None and "ringbuf" in self._shared:
            self._ring = RingReader(self._shared["ringbuf"])
