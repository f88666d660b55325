"""Fuzzing ELF symbols (`ElfFunctions`) and DWARF lines (`DwarfLines`) of damaged objects.

Real objects (built here with cc, and tests/bpf/build/*.bpf.o when present)
with bytes flipped and cut short: reading one gives symbols and frames or
raises ElfError / DwarfError with one line, nothing else (no IndexError,
struct.error, UnicodeDecodeError, hang). Read as a debug vmlinux
(`VmlinuxLines`), such a file gives frames or one VmlinuxError naming the file
and the fix.
PYTEST_LBR_FUZZ_EXAMPLES=N runs N cases per test (bench/README.md).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lbr.symbols.dwarf import DwarfError, DwarfLines, Frame
from pytest_lbr.symbols.elf import ElfError, ElfFunctions
from pytest_lbr.symbols.vmlinux import VmlinuxError, VmlinuxLines
from tests.fuzzing import fuzz_settings, report_runs

SRC = Path(__file__).parent / "data" / "inline.c"
BPF_OBJECTS = sorted((Path(__file__).parent / "bpf" / "build").glob("*.bpf.o"))

RUNS: Counter[str] = Counter()
_report_runs = report_runs(RUNS)


@dataclass(frozen=True)
class Seed:
    """An undamaged object and the byte ranges worth damaging most."""

    name: str
    data: bytes = field(repr=False)
    regions: tuple[tuple[int, int], ...]  # headers, tables, symbols, .debug_*
    functions: tuple[str, ...]
    addrs: tuple[int, ...]


def make_seed(path: Path) -> Seed:
    from elftools.elf.elffile import ELFFile

    data = path.read_bytes()
    regions = [(0, 64)]
    with open(path, "rb") as f:
        elf = ELFFile(f)
        regions.append((elf["e_phoff"], elf["e_phnum"] * elf["e_phentsize"]))
        regions.append((elf["e_shoff"], elf["e_shnum"] * elf["e_shentsize"]))
        for sec in elf.iter_sections():
            if sec.name.startswith((".debug", ".symtab", ".dynsym", ".strtab", ".shstrtab")):
                regions.append((sec["sh_offset"], sec["sh_size"]))
    funcs = ElfFunctions(path)
    names = tuple(sorted(funcs._named))
    addrs = tuple(sorted({a + d for a in funcs._named.values() for d in (0, 1, 4, 9)}))
    clipped = tuple((o, min(n, len(data) - o)) for o, n in regions if 0 <= o < len(data) and n)
    return Seed(path.name, data, clipped, names, addrs)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Seed]:
    out = []
    base = tmp_path_factory.mktemp("fuzz-elf")
    if shutil.which("cc") is not None:
        for version in ("4", "5"):
            binary = base / f"inline-dwarf{version}"
            subprocess.run(
                ["cc", "-g", "-O2", f"-gdwarf-{version}", "-o", str(binary), str(SRC)], check=True
            )
            out.append(make_seed(binary))
    out += [make_seed(p) for p in BPF_OBJECTS]
    if not out:
        pytest.skip("no cc and no tests/bpf/build/*.bpf.o: no object to damage")
    return out


@st.composite
def damage(draw: st.DrawFn, seed: Seed) -> bytes:
    """`seed`'s bytes with a few bytes changed (mostly in its tables) and maybe cut short."""
    data = bytearray(seed.data)
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            start, size = draw(st.sampled_from(seed.regions))
            pos = start + draw(st.integers(0, size - 1))
        else:
            pos = draw(st.integers(0, len(data) - 1))
        data[pos] = draw(st.one_of(st.integers(0, 255), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])))
    if draw(st.integers(0, 4)) == 0:
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def write(tmp: Path, data: bytes) -> Path:
    path = tmp / "damaged.o"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-elf-scratch")


def one_line(exc: Exception) -> None:
    assert "\n" not in str(exc), str(exc)


@pytest.mark.slow
@fuzz_settings(200)
@given(data=st.data())
def test_damaged_elf_symbols_or_one_line_error(
    seeds: list[Seed], scratch: Path, data: st.DataObject
) -> None:
    RUNS["test_damaged_elf_symbols_or_one_line_error"] += 1
    seed = data.draw(st.sampled_from(seeds))
    path = write(scratch, data.draw(damage(seed)))
    try:
        elf = ElfFunctions(path)
    except ElfError as exc:
        one_line(exc)
        return
    for name in seed.functions:
        for query in (elf.address, elf.file_offset):
            try:
                assert query(name) >= 0
            except ElfError as exc:
                one_line(exc)
        assert elf.return_type(name) in (
            None,
            "x64",
            "s8",
            "s16",
            "s32",
            "s64",
            "u8",
            "u16",
            "u32",
            "u64",
        )
    for addr in seed.addrs:
        found = elf.locate(addr)
        assert found is None or found[1] >= 0


@fuzz_settings(150)
@given(data=st.data())
def test_damaged_dwarf_frames_or_one_line_error(
    seeds: list[Seed], scratch: Path, data: st.DataObject
) -> None:
    RUNS["test_damaged_dwarf_frames_or_one_line_error"] += 1
    dwarf_seeds = [s for s in seeds if s.name.startswith("inline")]
    if not dwarf_seeds:
        pytest.skip("no cc: no object with DWARF lines to damage")
    seed = data.draw(st.sampled_from(dwarf_seeds))
    path = write(scratch, data.draw(damage(seed)))
    try:
        with DwarfLines(path) as dwarf:
            found = dwarf.lookup(seed.addrs)
    except DwarfError as exc:
        one_line(exc)
        return
    for frames in found.values():
        assert all(isinstance(f, Frame) and isinstance(f.line, int) for f in frames)


def test_undamaged_objects_still_read(seeds: list[Seed], scratch: Path) -> None:
    for seed in seeds:
        elf = ElfFunctions(write(scratch, seed.data))
        assert elf.address(seed.functions[0]) == elf._named[seed.functions[0]]
        if seed.name.startswith("inline"):
            with DwarfLines(scratch / "damaged.o") as dwarf:
                frames = dwarf.frames(elf.address("compute"))
            assert frames and frames[-1].function == "compute"


def test_unknown_dwarf_form_is_one_line(seeds: list[Seed], scratch: Path) -> None:
    """Regression: a zeroed form code in .debug_abbrev raised KeyError('DW_FORM_null')."""
    from elftools.elf.elffile import ELFFile

    seed = next((s for s in seeds if s.name.startswith("inline")), None)
    if seed is None:
        pytest.skip("no cc: no object with DWARF to damage")
    path = write(scratch, seed.data)
    with open(path, "rb") as f:
        abbrev = ELFFile(f).get_section_by_name(".debug_abbrev")["sh_offset"]
    data = bytearray(seed.data)
    data[abbrev + 4] = 0  # code, tag, children, DW_AT_producer, then its form
    path = write(scratch, bytes(data))
    assert ElfFunctions(path).return_type("compute") is None
    with pytest.raises(DwarfError, match=r"damaged DWARF \(KeyError"), DwarfLines(path) as dwarf:
        dwarf.lookup(seed.addrs)


def _vmlinux_lines(path: Path, addrs: tuple[int, ...]) -> dict[int, tuple[Frame, ...]] | None:
    """Frames of a damaged file read as a debug vmlinux (pyelftools: llvm-symbolizer
    copes with more damage), or None after checking the one-line VmlinuxError."""
    try:
        vm = VmlinuxLines(path, use_llvm=False, cache=False)
        found = vm.lookup(addrs)
        vm.functions()
        vm.symbol_address("compute")
    except VmlinuxError as exc:
        one_line(exc)
        assert str(path) in str(exc)
        return None
    return found


@fuzz_settings(150)
@given(data=st.data())
def test_damaged_debug_vmlinux_frames_or_one_line_error(
    seeds: list[Seed], scratch: Path, data: st.DataObject
) -> None:
    RUNS["test_damaged_debug_vmlinux_frames_or_one_line_error"] += 1
    dwarf_seeds = [s for s in seeds if s.name.startswith("inline")]
    if not dwarf_seeds:
        pytest.skip("no cc: no object with DWARF lines to damage")
    seed = data.draw(st.sampled_from(dwarf_seeds))
    found = _vmlinux_lines(write(scratch, data.draw(damage(seed))), seed.addrs)
    for frames in (found or {}).values():
        assert all(isinstance(f, Frame) and isinstance(f.line, int) for f in frames)


def test_damaged_debug_vmlinux_is_one_error_naming_the_file_and_the_fix(
    seeds: list[Seed], scratch: Path
) -> None:
    """Regression: a zeroed .debug_aranges length made `VmlinuxLines.lookup` raise
    DwarfError (AssertionError inside pyelftools) into the trace being symbolized."""
    from elftools.elf.elffile import ELFFile

    seed = next((s for s in seeds if s.name.startswith("inline")), None)
    if seed is None:
        pytest.skip("no cc: no object with DWARF to damage")
    path = write(scratch, seed.data)
    assert _vmlinux_lines(path, seed.addrs)  # undamaged: frames
    with open(path, "rb") as f:
        aranges = ELFFile(f).get_section_by_name(".debug_aranges")["sh_offset"]
    damaged = bytearray(seed.data)
    damaged[aranges] = 0  # the first unit's length
    path = write(scratch, bytes(damaged))
    vm = VmlinuxLines(path, use_llvm=False, cache=False)
    with pytest.raises(VmlinuxError) as info:
        vm.lookup(seed.addrs)
    message = str(info.value)
    assert message.startswith(f"{path}: damaged DWARF (AssertionError"), message
    assert message.endswith(
        ": this debug vmlinux is damaged or unreadable; replace it (delete it, then "
        "pytest-lbr fetch-vmlinux, or reinstall the kernel's -dbg package)"
    ), message
    one_line(info.value)
