"""On-disk cache of symbolized addresses, keyed by the vmlinux build-id.

Data only (no pickle): a small header, a string table and flat arrays of
unsigned integers, so a warm session loads 100,000 addresses in milliseconds.
Writes go to a temporary file renamed into place, so readers never see half a
file; a writer holds a lock file and merges what is on disk first, so
concurrent sessions (pytest-xdist workers) never drop each other's additions.

Layout (little endian):
    magic "PLBRSYM1", u32 nstrings, u32 naddrs, u32 nframes, u32 strings_len
    strings: '\\0'-separated UTF-8 (string 0 is "" and stands for None)
    addrs:   u64 * naddrs, sorted
    starts:  u32 * (naddrs + 1), index of each address's first frame
    frames:  u32 * 3 * nframes: function string, file string, line
"""

from __future__ import annotations

import fcntl
import gc
import os
import struct
import sys
import tempfile
from array import array
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from .dwarf import Frame

__all__ = ["FrameCache", "cache_dir", "gc_paused"]

_MAGIC = b"PLBRSYM1"
_HEADER = struct.Struct("<8sIIII")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/pytest-lbr, else ~/.cache/pytest-lbr."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-lbr"


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for a block that makes 100,000s of tuples that cannot
    form a cycle (frames and their per-address tuples): left on, it scans them
    again and again as they pile up, a third of a warm lookup's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _array(code: str, data: bytes) -> array:
    a = array(code)
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


class FrameCache:
    """Source frames of already symbolized addresses of one build of a kernel."""

    def __init__(self, build_id: str, directory: Path | None = None) -> None:
        self.path = (directory or cache_dir()) / "lines" / f"{build_id}.bin"

    def load(self) -> dict[int, tuple[Frame, ...]]:
        """Everything cached so far; {} when there is no (valid) cache file."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        try:
            return _decode(data)
        except (ValueError, IndexError, struct.error):
            return {}  # a foreign or damaged file: rebuilt on the next save

    def save(self, entries: Mapping[int, tuple[Frame, ...]]) -> None:
        """Add `entries` to the file atomically, keeping what other sessions added
        meanwhile; a no-op where the cache directory is not writable."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 -- held below
        except OSError:
            # A read-only home (the VM guests share the host's root read-only): the
            # cache only saves time, so run without it.
            return
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = self.load()
            if entries.keys() <= merged.keys():
                return  # nothing new
            merged.update(entries)
            data = _encode(merged)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".bin")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise


def _encode(entries: Mapping[int, tuple[Frame, ...]]) -> bytes:
    strings: dict[str, int] = {"": 0}

    def sid(s: str | None) -> int:
        if not s:
            return 0
        i = strings.get(s)
        if i is None:
            i = strings[s] = len(strings)
        return i

    addrs = array("Q")
    starts = array("I", [0])
    frames = array("I")
    for addr in sorted(entries):
        addrs.append(addr)
        for fr in entries[addr]:
            frames.extend((sid(fr.function), sid(fr.file), fr.line))
        starts.append(len(frames) // 3)
    blob = "\0".join(strings).encode()
    if sys.byteorder != "little":
        for a in (addrs, starts, frames):
            a.byteswap()
    header = _HEADER.pack(_MAGIC, len(strings), len(addrs), len(frames) // 3, len(blob))
    return header + blob + addrs.tobytes() + starts.tobytes() + frames.tobytes()


def _decode(data: bytes) -> dict[int, tuple[Frame, ...]]:
    magic, nstr, naddr, nframes, blen = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a pytest-lbr line cache")
    pos = _HEADER.size
    strs: list[str | None] = list(data[pos : pos + blen].decode().split("\0"))
    if len(strs) != nstr:
        raise ValueError("string table size")
    strs[0] = None
    pos += blen
    addrs = _array("Q", data[pos : pos + 8 * naddr])
    pos += 8 * naddr
    starts = _array("I", data[pos : pos + 4 * (naddr + 1)])
    pos += 4 * (naddr + 1)
    flat = _array("I", data[pos : pos + 12 * nframes])
    if len(flat) != 3 * nframes or len(starts) != naddr + 1:
        raise ValueError("truncated cache")
    # Every step below runs in C (map/zip over arrays, tuple.__new__ building the
    # NamedTuples without calling Frame()): this is most of a warm session's
    # start-up.
    name = strs.__getitem__
    with gc_paused():
        frames = list(
            map(
                partial(tuple.__new__, Frame),
                zip(map(name, flat[0::3]), map(name, flat[1::3]), flat[2::3], strict=True),
            )
        )
        per_addr = map(tuple, map(frames.__getitem__, map(slice, starts, starts[1:])))
        return dict(zip(addrs, per_addr, strict=True))
