"""The on-disk line cache: what goes in comes out, whichever way a lookup reads it."""

from __future__ import annotations

import random
from pathlib import Path

from pytest_lbr.symbols.cache import _SEARCH_RATIO, FrameCache, FrameTable
from pytest_lbr.symbols.dwarf import Frame

BASE = 0xFFFFFFFF81000000


def _entries(n: int, seed: int = 1) -> dict[int, tuple[Frame, ...]]:
    """Addresses with chains of 0-3 frames; many addresses share a line (as the
    instructions of one source line do) and many share frames."""
    rnd = random.Random(seed)
    files = ["kernel/bpf/syscall.c", "net/ipv4/tcp.c", None]
    funcs = ["bpf_prog_load", "tcp_sendmsg", "__htab_map_lookup_elem", None]
    out: dict[int, tuple[Frame, ...]] = {}
    addrs = sorted(rnd.sample(range(BASE, BASE + 50 * n), n))
    for a in addrs:
        depth = rnd.choice((0, 1, 1, 1, 2, 3))
        out[a] = tuple(
            Frame(rnd.choice(funcs), rnd.choice(files), rnd.randrange(1, 40)) for _ in range(depth)
        )
    return out


def test_round_trip_keeps_every_chain(tmp_path: Path) -> None:
    entries = _entries(3000)
    cache = FrameCache("00ff", tmp_path)
    cache.save(entries)
    assert cache.load() == entries
    # Shared frames and chains are stored once: far fewer than there are addresses.
    table = cache.table()
    assert len(table) == len(entries)
    assert len(table._frame_fields) // 3 < len(entries) // 2


def test_a_few_addresses_and_many_get_the_same_answers(tmp_path: Path) -> None:
    """A lookup much smaller than the table binary-searches it; a large one decodes
    it all, and one asking for every cached address skips filtering. All must answer
    alike, including for addresses the cache lacks."""
    entries = _entries(4000, seed=2)
    cache = FrameCache("00ff", tmp_path)
    cache.save(entries)
    absent = {BASE - 1, BASE + 50 * 4000 + 7, max(entries) + 1}
    few = set(random.Random(3).sample(sorted(entries), 4000 // _SEARCH_RATIO // 2)) | absent
    many = set(random.Random(4).sample(sorted(entries), 3000)) | absent
    everything = set(entries) | absent
    # As large as the table but not all of it: the filtering path again.
    half_and_others = set(sorted(entries)[::2]) | {BASE - 8 * i for i in range(1, 2001)}
    for wanted in (few, many, everything, half_and_others):
        table = cache.table()  # fresh: nothing decoded yet
        got = table.select(wanted)
        assert got == {a: entries[a] for a in wanted if a in entries}
    # Once decoded in full, small lookups read the decoded table.
    table = cache.table()
    table.select(many)
    assert table.select(few) == {a: entries[a] for a in few if a in entries}


def test_damaged_older_and_truncated_files_read_as_empty(tmp_path: Path) -> None:
    cache = FrameCache("00ff", tmp_path)
    cache.save(_entries(500))
    good = cache.path.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    older = b"PLBRSYM1" + good[8:]
    for data in (bytes(flipped), good[:-5], good[:20], older, b""):
        cache.path.write_bytes(data)
        assert len(cache.table()) == 0
        assert cache.load() == {}
    # The next save replaces such a file.
    cache.save({BASE: (Frame("f", "a.c", 3),)})
    assert cache.load() == {BASE: (Frame("f", "a.c", 3),)}


def test_empty_table_selects_nothing() -> None:
    assert FrameTable().select({BASE}) == {}
    assert FrameTable().to_dict() == {}
