"""LBR record decoding and tracer trimming, on records built from real kernel addresses.

No machine here has LBR, so the records are synthesized, but every address is
a real one from this host's /proc/kallsyms and the layout is the kernel's
struct perf_branch_entry.
"""

from __future__ import annotations

import bisect
import ctypes
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr.capture.hooks.records import ConfigRecord, decode_record, hit_record_type
from pytest_lbr.capture.hooks.tracer_object import tracer_layout, tracer_object
from pytest_lbr.capture.lbr.decode import branch_kind, decode_branches, decode_flags
from pytest_lbr.capture.trim import trim_tracer
from pytest_lbr.model import Location

CALL, RET, COND, UNCOND, IND_CALL = 4, 6, 1, 2, 5


class Kallsyms:
    """Floor lookup over this host's text symbols."""

    def __init__(self) -> None:
        addrs: dict[str, int] = {}
        try:
            text = Path("/proc/kallsyms").read_text()
        except OSError as exc:
            pytest.skip(f"/proc/kallsyms unreadable: {exc}")
        for line in text.splitlines():
            addr, kind, name = line.split()[:3]
            if kind in "tT" and int(addr, 16):
                addrs.setdefault(name, int(addr, 16))
        if not addrs:
            pytest.skip("/proc/kallsyms shows no addresses (kptr_restrict; run as root)")
        self.by_name = addrs
        self.sorted = sorted((a, n) for n, a in addrs.items())
        self.keys = [a for a, _ in self.sorted]

    def addr(self, name: str, off: int = 0) -> int:
        if name not in self.by_name:
            pytest.skip(f"{name} is not in this kernel's kallsyms")
        return self.by_name[name] + off

    def locate(self, addr: int) -> Location:
        i = bisect.bisect_right(self.keys, addr) - 1
        base, name = self.sorted[i]
        return Location(addr, name, addr - base)

    def first(self, *names: str) -> str:
        for n in names:
            if n in self.by_name:
                return n
        pytest.skip(f"none of {names} in kallsyms")


@pytest.fixture(scope="module")
def ksyms() -> Kallsyms:
    return Kallsyms()


def flags(kind: int, cycles: int = 0, mispred: bool = False) -> int:
    return kind << 20 | cycles << 4 | int(mispred)


def test_flag_word_decodes_like_the_uapi_bitfield() -> None:
    f = decode_flags(flags(RET, cycles=0xABCD, mispred=True) | 1 << 1 | 1 << 3)
    assert (f.mispred, f.predicted, f.in_tx, f.abort, f.cycles, f.type) == (
        True,
        True,
        False,
        True,
        0xABCD,
        RET,
    )
    assert [branch_kind(flags(t)) for t in range(9)] == [
        "unknown",
        "cond",
        "jmp",
        "ind_jmp",
        "call",
        "ind_call",
        "ret",
        "syscall",
        "unknown",  # SYSRET and beyond have no kind of their own
    ]


def _fexit_vfs_write(k: Kallsyms) -> tuple[list[tuple[int, int, int]], str]:
    """What an fexit on vfs_write would see, newest record first."""
    enter = k.first("__bpf_prog_enter_recur", "__bpf_prog_enter", "__bpf_prog_enter_sleepable")
    helper = k.first("bpf_get_branch_snapshot", "bpf_get_smp_processor_id")
    tramp = k.first("migrate_disable", "__rcu_read_lock")
    oldest_first = [
        (k.addr("ksys_write", 0x50), k.addr("vfs_write"), flags(CALL, 3)),
        (k.addr("vfs_write", 0x30), k.addr("vfs_write", 0x60), flags(COND, 1, mispred=True)),
        (k.addr("vfs_write", 0x90), k.addr("write_null"), flags(IND_CALL, 7)),
        (k.addr("write_null", 0x8), k.addr("vfs_write", 0x96), flags(RET, 2)),
        (k.addr("vfs_write", 0x120), k.addr(enter, 0x10), flags(RET, 4)),  # into the trampoline
        (k.addr(enter, 0x20), k.addr(tramp), flags(CALL, 1)),
        (k.addr(tramp, 0x8), k.addr(enter, 0x25), flags(RET, 1)),
        (k.addr(enter, 0x30), k.addr(helper), flags(CALL, 1)),
    ]
    return list(reversed(oldest_first)), "vfs_write"


def test_records_decode_oldest_first_with_symbols(ksyms: Kallsyms) -> None:
    entries, _ = _fexit_vfs_write(ksyms)
    locs = {a: ksyms.locate(a) for e in entries for a in e[:2]}
    branches = decode_branches(entries, locs)
    assert len(branches) == len(entries)
    first = branches[0]
    assert (first.src.symbol, first.dst.symbol, first.dst.offset) == ("ksys_write", "vfs_write", 0)
    assert first.kind == "call" and first.cycles == 3
    assert branches[1].kind == "cond" and branches[1].mispredicted
    assert branches[2].kind == "ind_call" and branches[2].dst.symbol == "write_null"
    assert str(branches[3]) == f"write_null+0x8 -> vfs_write+{0x96:#x}"


def test_unknown_addresses_stay_bare(ksyms: Kallsyms) -> None:
    entries, _ = _fexit_vfs_write(ksyms)
    (b,) = decode_branches(entries[:1], {})
    assert b.src.symbol is None and b.src.addr == entries[0][0]


def test_trim_drops_everything_newer_than_the_traced_function(ksyms: Kallsyms) -> None:
    entries, func = _fexit_vfs_write(ksyms)
    locs = {a: ksyms.locate(a) for e in entries for a in e[:2]}
    raw = decode_branches(entries, locs)
    kept = trim_tracer(raw, lambda loc: loc.symbol == func)
    # The newest kept record is vfs_write returning into the trampoline.
    assert len(kept) == 5
    assert kept[-1].src.symbol == "vfs_write" and kept[-1].kind == "ret"
    assert kept == raw[:5]


def test_trim_without_a_function_drops_the_tracer_run(ksyms: Kallsyms) -> None:
    entries, _ = _fexit_vfs_write(ksyms)
    locs = {a: ksyms.locate(a) for e in entries for a in e[:2]}
    raw = decode_branches(entries, locs)
    kept = trim_tracer(raw, None)
    # vfs_write -> __bpf_prog_enter* is the first record into the tracer: it goes too.
    assert [b.src.symbol for b in kept] == ["ksys_write", "vfs_write", "vfs_write", "write_null"]


def test_trim_keeps_all_when_nothing_is_the_tracer(ksyms: Kallsyms) -> None:
    entries, _ = _fexit_vfs_write(ksyms)
    locs = {a: ksyms.locate(a) for e in entries for a in e[:2]}
    raw = decode_branches(entries[4:], locs)
    assert trim_tracer(raw, lambda loc: loc.symbol == "no_such_function") == raw


@pytest.fixture(scope="module")
def tracer() -> Path:
    """The packaged tracer object of this install (the one the LBR backend loads)."""
    try:
        return tracer_object()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc.filename} not built (make -C bpf)")


def _btf_struct(obj: Path, struct_name: str) -> tuple[int, list[tuple[str, int]]]:
    """(size, [(member, byte offset)]) of a struct in `obj`'s BTF, as bpftool prints it."""
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed")
    dump = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    lines = dump.splitlines()
    start = next(i for i, line in enumerate(lines) if f"STRUCT '{struct_name}'" in line)
    size = int(lines[start].split("size=")[1].split()[0])
    members = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        members.append((line.split("'")[1], int(line.split("bits_offset=")[1]) // 8))
    return size, members


def test_layout_comes_from_the_object_btf(tracer: Path) -> None:
    layout = tracer_layout(tracer)
    size, members = _btf_struct(tracer, "lbr_hit")
    assert (layout.hit_size, layout.max_entries) == (size, 32)
    assert layout.constants["LBR_RECORD_HIT"] == 1
    assert layout.constants["LBR_HOOK_FEXIT"] == 2
    assert layout.constants["LBR_HIT_HAS_RETVAL"] == 1
    assert ctypes.sizeof(hit_record_type(layout.max_entries)) == 80 + 24 * layout.max_entries


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_arch_object_has_the_same_layout(tracer: Path, arch: str) -> None:
    assert tracer_layout(tracer_object(arch)) == tracer_layout(tracer)


@pytest.mark.parametrize("struct_name", ["lbr_hit", "lbr_config"])
def test_mirrors_match_the_object_btf(tracer: Path, struct_name: str) -> None:
    mirror = (
        hit_record_type(tracer_layout(tracer).max_entries)
        if struct_name == "lbr_hit"
        else ConfigRecord
    )
    size, members = _btf_struct(tracer, struct_name)
    fields = [(n.rstrip("_"), getattr(mirror, n).offset) for n, *_ in mirror._fields_]
    assert members == fields
    assert size == ctypes.sizeof(mirror)


def test_ring_buffer_record_decodes(ksyms: Kallsyms, tracer: Path) -> None:
    entries, _ = _fexit_vfs_write(ksyms)
    layout = tracer_layout(tracer)
    c = layout.constants
    rec: Any = hit_record_type(layout.max_entries)(
        type=c["LBR_RECORD_HIT"],
        hook=c["LBR_HOOK_FEXIT"],
        cookie=3 << 32 | 7,
        retval=-22,
        flags=c["LBR_HIT_HAS_RETVAL"],
        cpu=1,
        pid=100,
        tid=101,
        snapshot_ret=24 * len(entries),
        nr_entries=len(entries),
    )
    for i, (src, dst, fl) in enumerate(entries):
        rec.entries[i].from_, rec.entries[i].to, rec.entries[i].flags = src, dst, fl
    hit = decode_record(bytes(rec), layout)
    assert (hit.target, hit.function, hit.retval, hit.cpu, hit.pid, hit.tid) == (
        3,
        7,
        -22,
        1,
        100,
        101,
    )
    assert hit.entries == entries
    assert struct.unpack_from("<I", bytes(rec))[0] == c["LBR_RECORD_HIT"]


def test_a_record_says_its_comm_and_interrupt_context(tracer: Path) -> None:
    layout = tracer_layout(tracer)
    c = layout.constants
    rec: Any = hit_record_type(layout.max_entries)(
        type=c["LBR_RECORD_HIT"],
        hook=c["LBR_HOOK_FENTRY"],
        flags=c["LBR_HIT_IN_INTERRUPT"],
        comm=b"ksoftirqd/1",
        pid=15,
        tid=15,
    )
    hit = decode_record(bytes(rec), layout)
    assert (hit.comm, hit.in_interrupt, hit.retval) == ("ksoftirqd/1", True, None)
    rec.flags, rec.comm = c["LBR_HIT_HAS_RETVAL"], b"fifteen-chars-x"  # TASK_COMM_LEN - 1
    hit = decode_record(bytes(rec), layout)
    assert (hit.comm, hit.in_interrupt, hit.retval) == ("fifteen-chars-x", False, 0)
