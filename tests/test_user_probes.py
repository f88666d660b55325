"""uprobe targets on the graph backend, without a kernel: the ELF side (where the
probe goes, what type the return value has, which function an address is in) on
a real binary built with gcc, and the cut of uprobe event lines into hits, with
event bodies in the kernel's format built from that binary's real addresses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.capture.graph.hits import build_hits
from pytest_lbr.capture.graph.text import EventRecord
from pytest_lbr.symbols.elf import ElfError, ElfFunctions
from pytest_lbr.targets import parse_targets

KVSTORE = Path(__file__).parent.parent / "examples" / "uprobe" / "kvstore.c"


@pytest.fixture(scope="module")
def kvstore(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (ci/setup installs it)")
    out = tmp_path_factory.mktemp("kv") / "kvstore"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(KVSTORE)], check=True)
    return out


def nm(path: Path) -> dict[str, int]:
    out = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    return {p[2]: int(p[0], 16) for p in (line.split() for line in out.splitlines()) if len(p) == 3}


def test_probe_offset_and_return_type_come_from_the_binary(kvstore: Path) -> None:
    elf = ElfFunctions(kvstore)
    assert elf.address("parse_request") == nm(kvstore)["parse_request"]
    # readelf's program headers say where the text is in the file
    headers = subprocess.run(
        ["readelf", "-lW", str(kvstore)], capture_output=True, text=True, check=True
    ).stdout
    load = [
        line.split()
        for line in headers.splitlines()
        if line.strip().startswith("LOAD") and "E" in line.split()[-2]
    ]
    offset, vaddr = int(load[0][1], 16), int(load[0][2], 16)
    assert elf.file_offset("parse_request") == elf.address("parse_request") - vaddr + offset
    assert elf.return_type("parse_request") == "s32"  # int: -1 must read as -1
    assert elf.return_type("handle") == "x64"  # const char *
    assert elf.locate(elf.address("handle") + 5) == ("handle", 5)


def test_bad_binaries_get_one_clear_message(kvstore: Path, tmp_path: Path) -> None:
    with pytest.raises(ElfError, match="no function named 'nope'"):
        ElfFunctions(kvstore).address("nope")
    text = tmp_path / "script.sh"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(ElfError, match="not an ELF file"):
        ElfFunctions(text)
    with pytest.raises(ElfError, match="cannot read"):
        ElfFunctions(tmp_path / "missing")


def test_uprobe_events_become_hits_with_the_user_call_edge(kvstore: Path) -> None:
    elf = ElfFunctions(kvstore)
    bias = 0x5555_5555_4000  # where a PIE is loaded; any page-aligned value works
    entry = bias + elf.address("parse_request")
    site = bias + elf.address("handle") + 0x2A  # an address inside handle()
    targets = parse_targets(
        [f"uprobe:{kvstore}:parse_request", f"uretprobe:{kvstore}:parse_request"]
    )
    records = [
        EventRecord(4242, 0, 100, "e0", f"({entry:#x}) caller={site:#x}"),
        EventRecord(4242, 0, 200, "e1", f"({entry:#x} <- {site:#x}) ret=-1"),
        EventRecord(4242, 0, 300, "e0", f"({entry:#x}) caller={site:#x}"),
        EventRecord(4242, 0, 400, "e1", f"({entry:#x} <- {site:#x}) ret=2"),
    ]
    never = [lambda name, addr: False] * 2
    hits = build_hits(targets, never, {0: "e0", 1: "e1"}, {}, records, {0: elf, 1: elf})
    assert [(h.target.split(":")[0], h.retval, h.tid) for h in hits] == [
        ("uprobe", None, 4242),
        ("uretprobe", -1, 4242),
        ("uprobe", None, 4242),
        ("uretprobe", 2, 4242),
    ]
    call = hits[0].branches[0]
    assert (call.kind, call.src.symbol, call.src.offset, call.dst.symbol) == (
        "call",
        "handle",
        0x2A,
        "parse_request",
    )
    assert call.src.addr == site and call.dst.addr == entry
    back = hits[1].branches[0]
    assert (back.kind, back.src.symbol, back.dst.symbol) == ("ret", "parse_request", "handle")
