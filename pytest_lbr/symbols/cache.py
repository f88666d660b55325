"""On-disk cache of symbolized addresses, keyed by the vmlinux build-id.

Data only (no pickle): a small header, a string table and flat arrays of
unsigned integers. Frames and whole inline chains ("stacks") are stored once
each, however many addresses share them. A warm session reads the arrays as
they are and decodes only what a lookup asks for: a few addresses cost a
binary search each; a large share of the file is decoded in a few C-level
passes over whole arrays (bench/RESULTS.md times 100,000 addresses).

Writes go to a temporary file renamed into place, so readers never see half a
file; a writer holds a lock file and merges what is on disk first, so
concurrent sessions (pytest-xdist workers) never drop each other's additions.

Layout (little endian):
    magic "PLBRSYM2", u32 nstrings, u32 naddrs, u32 nstacks, u32 nframes,
    u32 nlinks, u32 strings_len, u32 crc32 of everything after the header
    strings: '\\0'-separated UTF-8 (string 0 is "" and stands for None)
    addrs:   u64 * naddrs, sorted
    stack:   u32 * naddrs, the stack of each address
    starts:  u32 * (nstacks + 1), each stack's first link
    links:   u32 * nlinks, frame indices, innermost first
    frames:  u32 * 3 * nframes: function string, file string, line
"""

from __future__ import annotations

import fcntl
import gc
import os
import struct
import sys
import tempfile
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from itertools import compress
from pathlib import Path

from .frame import Frame

__all__ = ["FrameCache", "FrameTable", "cache_dir", "gc_paused"]

_MAGIC = b"PLBRSYM2"
_HEADER = struct.Struct("<8sIIIIIII")

Stack = tuple[Frame, ...]

# A lookup this many times smaller than the table binary-searches each address
# (~6 us each) instead of decoding the whole table (~0.8 us per entry): the two
# cost the same at about 1/8 (measured on a 98,000-address cache).
_SEARCH_RATIO = 8


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


def _array(code: str, data: bytes | memoryview) -> array:
    a = array(code)
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


class FrameTable:
    """The cache file's contents, read but not decoded: `select` decodes what is asked."""

    def __init__(self, data: bytes = b"") -> None:
        self._strings: list[str | None] = [None]
        self.addrs = array("Q")
        self._stack_of = array("I")
        self._starts = array("I", [0])
        self._links = array("I")
        self._frame_fields = array("I")
        self._stacks: list[Stack] | None = None
        self._memo: dict[int, Stack] = {}
        if data:
            self._read(data)

    def __len__(self) -> int:
        return len(self.addrs)

    def _read(self, data: bytes) -> None:
        """Read a cache file's bytes; ValueError (one line) if they are not a
        complete cache of this format."""
        if len(data) < _HEADER.size:
            raise ValueError("truncated cache header")
        magic, nstr, naddr, nstacks, nframes, nlinks, blen, crc = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a pytest-lbr line cache (or an older format)")
        view = memoryview(data)
        pos = _HEADER.size
        # Our own writer made every index: a matching checksum (1 ms for 4 MiB) is
        # what lets decoding trust them, instead of range-checking each one.
        if zlib.crc32(view[pos:]) != crc:
            raise ValueError("damaged cache (checksum)")
        try:
            text = bytes(view[pos : pos + blen]).decode()
        except UnicodeDecodeError:
            raise ValueError("cache strings are not UTF-8") from None
        strings: list[str | None] = list(text.split("\0"))
        if len(strings) != nstr:
            raise ValueError("string table size")
        strings[0] = None
        pos += blen
        parts = []
        for code, size, count in (
            ("Q", 8, naddr),
            ("I", 4, naddr),
            ("I", 4, nstacks + 1),
            ("I", 4, nlinks),
            ("I", 4, 3 * nframes),
        ):
            part = _array(code, view[pos : pos + size * count])
            if len(part) != count:
                raise ValueError("truncated cache")
            parts.append(part)
            pos += size * count
        if pos != len(data):
            raise ValueError("cache size")
        # A checksum only proves the file is as written: a crafted or buggy one can
        # still index past a table. One C-level max() per array rules that out.
        _, stack_of, _, links, fields = parts
        if (
            (naddr and max(stack_of) >= nstacks)
            or (nlinks and max(links) >= nframes)
            or (nframes and max(max(fields[0::3]), max(fields[1::3])) >= nstr)
        ):
            raise ValueError("cache index out of range")
        self._strings = strings
        self.addrs, self._stack_of, self._starts, self._links, self._frame_fields = parts

    def select(self, wanted: set[int]) -> dict[int, Stack]:
        """The frames of each address of `wanted` that the table holds."""
        if not self.addrs or not wanted:
            return {}
        if len(wanted) * _SEARCH_RATIO < len(self.addrs):
            return self._search(wanted)
        stacks = self._all_stacks()
        with gc_paused():
            if len(wanted) >= len(self.addrs) and set(self.addrs) <= wanted:
                # Every cached address is asked for (a session repeating or extending
                # an earlier one): nothing to filter. Comparing two sets walks both
                # hash tables in step, twice as fast as one probe per address.
                return dict(zip(self.addrs, map(stacks.__getitem__, self._stack_of), strict=True))
            # Walk the table (sorted, so memory is read in order) asking the
            # set, rather than probing the table with each wanted address.
            keep = list(map(wanted.__contains__, self.addrs))
            return dict(
                zip(
                    compress(self.addrs, keep),
                    map(stacks.__getitem__, compress(self._stack_of, keep)),
                    strict=True,
                )
            )

    def to_dict(self) -> dict[int, Stack]:
        """Everything in the table."""
        stacks = self._all_stacks()
        with gc_paused():
            return dict(zip(self.addrs, map(stacks.__getitem__, self._stack_of), strict=True))

    def _search(self, wanted: set[int]) -> dict[int, Stack]:
        out: dict[int, Stack] = {}
        addrs, n = self.addrs, len(self.addrs)
        for a in wanted:
            i = bisect_left(addrs, a)
            if i < n and addrs[i] == a:
                out[a] = self._stack(self._stack_of[i])
        return out

    def _stack(self, k: int) -> Stack:
        if self._stacks is not None:
            return self._stacks[k]
        got = self._memo.get(k)
        if got is None:
            f, s = self._frame_fields, self._strings
            got = self._memo[k] = tuple(
                Frame(s[f[3 * j]], s[f[3 * j + 1]], f[3 * j + 2])
                for j in self._links[self._starts[k] : self._starts[k + 1]]
            )
        return got

    def _all_stacks(self) -> list[Stack]:
        if self._stacks is None:
            # Every step runs in C (map/zip over arrays, tuple.__new__ building the
            # NamedTuples without calling Frame()): this is most of a large warm lookup.
            name = self._strings.__getitem__
            f = self._frame_fields
            with gc_paused():
                frames = list(
                    map(
                        partial(tuple.__new__, Frame),
                        zip(map(name, f[0::3]), map(name, f[1::3]), f[2::3], strict=True),
                    )
                )
                # A tuple: slicing it makes each stack's tuple in one step.
                linked = tuple(map(frames.__getitem__, self._links))
                starts = self._starts
                self._stacks = list(map(linked.__getitem__, map(slice, starts, starts[1:])))
        return self._stacks


class FrameCache:
    """Source frames of already symbolized addresses of one build of a kernel."""

    def __init__(self, build_id: str, directory: Path | None = None) -> None:
        self.path = (directory or cache_dir()) / "lines" / f"{build_id}.bin"

    def table(self) -> FrameTable:
        """The cache file, read for `FrameTable.select`; empty when there is no
        (valid) cache file."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return FrameTable()
        try:
            return FrameTable(data)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError):
            return FrameTable()  # a foreign, older or damaged file: rebuilt on the next save

    def load(self) -> dict[int, Stack]:
        """Everything cached so far; {} when there is no (valid) cache file."""
        return self.table().to_dict()

    def save(self, entries: Mapping[int, Stack]) -> None:
        """Add `entries` to the file atomically, keeping what other sessions added
        meanwhile; a no-op where the cache directory is not writable."""
        try:
            if not self.path.parent.is_dir():  # mkdir(2) only once: a save may come in a trace
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


def _encode(entries: Mapping[int, Stack]) -> bytes:
    strings: dict[str, int] = {"": 0}
    frame_ids: dict[tuple[int, int, int], int] = {}
    stack_ids: dict[tuple[int, ...], int] = {}
    addrs, stack_of = array("Q"), array("I")
    starts, links, fields = array("I", [0]), array("I"), array("I")

    def sid(s: str | None) -> int:
        return strings.setdefault(s, len(strings)) if s else 0

    for addr in sorted(entries):
        chain = []
        for fr in entries[addr]:
            key = (sid(fr.function), sid(fr.file), fr.line)
            fid = frame_ids.get(key)
            if fid is None:
                fid = frame_ids[key] = len(frame_ids)
                fields.extend(key)
            chain.append(fid)
        stack = tuple(chain)
        k = stack_ids.get(stack)
        if k is None:
            k = stack_ids[stack] = len(stack_ids)
            links.extend(stack)
            starts.append(len(links))
        addrs.append(addr)
        stack_of.append(k)
    blob = "\0".join(strings).encode()
    body = (addrs, stack_of, starts, links, fields)
    if sys.byteorder != "little":
        for a in body:
            a.byteswap()
    payload = blob + b"".join(a.tobytes() for a in body)
    header = _HEADER.pack(
        _MAGIC,
        len(strings),
        len(addrs),
        len(stack_ids),
        len(frame_ids),
        len(links),
        len(blob),
        zlib.crc32(payload),
    )
    return header + payload
