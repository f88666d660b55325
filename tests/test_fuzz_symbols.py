"""Fuzzing the symbol cache file (`FrameTable`, `FrameCache`) and /proc/kallsyms-style
text (`KernelSymbols`) with Hypothesis.

The cache file is read back from disk (other sessions, older versions, a full
disk); kallsyms text from the kernel or a test. A damaged cache reads as empty
(`FrameTable(data)` raises ValueError, one line); kallsyms lines that are not
symbols are skipped. Nothing else escapes.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_lbr.symbols.cache import FrameCache, FrameTable, _encode
from pytest_lbr.symbols.dwarf import Frame
from pytest_lbr.symbols.kallsyms import KernelSymbols, Symbol
from tests.fuzzing import fuzz_settings, report_runs

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-symbols")


# Names as DWARF gives them: no NUL (the file's separator), no lone surrogates
# (decoded with errors="replace").
name = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=6
)
frame = st.builds(
    Frame,
    st.none() | name,
    st.none() | name,
    st.integers(0, (1 << 32) - 1),
)
stacks = st.dictionaries(
    st.integers(0, (1 << 64) - 1), st.lists(frame, max_size=3).map(tuple), max_size=8
)
VALID = _encode({0x1000: (Frame("f", "a.c", 3),), 0x2000: ()})
HEADER = struct.Struct("<8sIIIIIII")


def with_crc(data: bytes) -> bytes:
    """`data` with the header's checksum made right: what a crafted file would do."""
    if len(data) < HEADER.size:
        return data
    fields = list(HEADER.unpack_from(data))
    fields[-1] = zlib.crc32(data[HEADER.size :])
    return HEADER.pack(*fields) + data[HEADER.size :]


@st.composite
def cache_bytes(draw: st.DrawFn) -> bytes:
    base = bytearray(draw(st.sampled_from([VALID, _encode(draw(stacks))])))
    for _ in range(draw(st.integers(0, 6))):
        base[draw(st.integers(0, len(base) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del base[draw(st.integers(0, len(base))) :]
    data = bytes(base)
    return with_crc(data) if draw(st.booleans()) else data


def check_table(data: bytes, wanted: set[int]) -> None:
    try:
        table = FrameTable(data)
    except ValueError as exc:
        assert type(exc) is ValueError and "\n" not in str(exc)
        return
    for got in (table.select(wanted), table.to_dict(), table.select({*wanted, *table.addrs})):
        for stack in got.values():
            assert all(isinstance(f, Frame) for f in stack)


@fuzz_settings(600)
@given(cache_bytes() | st.binary(max_size=200), st.sets(st.integers(0, 0x3000), max_size=4))
@example(b"PLBRSYM2", {0x1000})  # regression: short header raised struct.error
@example(with_crc(VALID[: HEADER.size] + b"\xff" + VALID[HEADER.size + 1 :]), {0x1000})
@example(with_crc(VALID[:-4] + b"\xff\xff\xff\x00"), {0x1000, 0x2000})  # frame -> no string
def test_cache_bytes_read_or_are_empty(data: bytes, wanted: set[int]) -> None:
    RUNS["test_cache_bytes_read_or_are_empty"] += 1
    check_table(data, wanted)


@fuzz_settings(200)
@given(cache_bytes(), st.sets(st.integers(0, 0x3000), max_size=4))
def test_cache_file_on_disk_reads_or_is_empty(scratch: Path, data: bytes, wanted: set[int]) -> None:
    RUNS["test_cache_file_on_disk_reads_or_is_empty"] += 1
    cache = FrameCache("0123abcd", scratch)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_bytes(data)
    cache.table().select(wanted)
    assert isinstance(cache.load(), dict)


@fuzz_settings(150)
@given(stacks)
def test_cache_round_trips(entries: dict[int, tuple[Frame, ...]]) -> None:
    """Valid files still read back exactly (None and "" are one string)."""
    RUNS["test_cache_round_trips"] += 1
    norm = {
        a: tuple(Frame(f.function or None, f.file or None, f.line) for f in s)
        for a, s in entries.items()
    }
    assert FrameTable(_encode(entries)).to_dict() == norm


HEX = "0123456789abcdef"
kallsyms_line = st.one_of(
    st.tuples(
        st.text(alphabet=HEX, min_size=1, max_size=18) | st.text(max_size=5),
        st.sampled_from("tTwWdDbB") | st.text(max_size=2),
        st.text(min_size=1, max_size=10).filter(lambda s: not s.isspace()),
        st.sampled_from(["", "[bpf]", "[ext4]", "[", "]"]),
    ).map(" ".join),
    st.text(max_size=40),
    st.just("ffffffff81000000 T _stext"),
)


@fuzz_settings(800)
@given(
    st.lists(kallsyms_line, max_size=20).map("\n".join),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=4),
)
@example("zz T name", [0])  # regression: a non-hex address raised ValueError
@example("ffffffff81000000 T", [0])
@example("٣ T x", [3])
def test_kallsyms_text_reads_without_raising(scratch: Path, text: str, addrs: list[int]) -> None:
    RUNS["test_kallsyms_text_reads_without_raising"] += 1
    path = scratch / "kallsyms"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    syms = KernelSymbols(str(path))
    for addr in [*addrs, *syms.starts[:3]]:
        found = syms.lookup(addr)
        assert found is None or (isinstance(found, Symbol) and found.offset >= 0)
        syms.end_of(addr)
        assert isinstance(syms.in_core(addr), bool)


@fuzz_settings(200)
@given(st.binary(max_size=300))
def test_kallsyms_bytes_read_without_raising(scratch: Path, data: bytes) -> None:
    RUNS["test_kallsyms_bytes_read_without_raising"] += 1
    path = scratch / "kallsyms"
    path.write_bytes(data)
    KernelSymbols(str(path)).lookup(0xFFFFFFFF81000000)
