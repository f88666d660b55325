"""pyelftools DWARF lines and inline frames on a small ELF the test builds itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.symbols.dwarf import DwarfLines, kernel_relative
from pytest_lbr.symbols.vmlinux import VmlinuxError, VmlinuxLines

SRC = Path(__file__).parents[1] / "data" / "inline.c"


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path_factory.mktemp("dwarf") / "inline"
    subprocess.run(["gcc", "-g", "-O2", "-gdwarf-5", "-o", str(out), str(SRC)], check=True)
    return out


def test_kernel_relative_paths() -> None:
    assert kernel_relative("debian/build/build_amd64_none_amd64/kernel/bpf/syscall.c") == (
        "kernel/bpf/syscall.c"
    )
    assert kernel_relative("/usr/src/x/debian/build/build_amd64_none_amd64/fs/../fs/exec.c") == (
        "fs/exec.c"
    )
    assert kernel_relative("include/linux/list.h") == "include/linux/list.h"


def test_inlined_frames_and_lines(binary: Path) -> None:
    vm = VmlinuxLines(binary, use_llvm=False, cache=False)
    start = vm.symbol_address("compute")
    assert start is not None
    ((_, size, _),) = [(s, z, n) for s, z, n in zip(*vm.functions(), strict=True) if n == "compute"]
    frames = vm.lookup(range(start, start + size))
    chains = [f for f in frames.values() if f]
    assert chains, "no line for any byte of compute()"
    deepest = max(chains, key=len)
    # square() inlined into sum_squares() inlined into compute().
    assert [f.function for f in deepest] == ["square", "sum_squares", "compute"]
    assert all(f.file.endswith("inline.c") for f in deepest)
    assert deepest[0].line == 4 and deepest[1].line == 9 and deepest[2].line in (15, 16)


def test_agrees_with_llvm_symbolizer(binary: Path) -> None:
    llvm = VmlinuxLines(binary, cache=False)
    if llvm._llvm is None:
        pytest.skip("llvm-symbolizer is not installed (Debian package llvm)")
    start = llvm.symbol_address("compute")
    (size,) = [z for s, z, n in zip(*llvm.functions(), strict=True) if n == "compute"]
    addrs = list(range(start, start + size))
    py = VmlinuxLines(binary, use_llvm=False, cache=False)
    assert py.lookup(addrs) == llvm.lookup(addrs)


def test_no_dwarf_is_an_error(tmp_path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path / "nodebug"
    subprocess.run(["gcc", "-O2", "-o", str(out), str(SRC)], check=True)
    subprocess.run(["strip", "--strip-debug", str(out)], check=True)
    with pytest.raises(ValueError, match="no DWARF"):
        DwarfLines(out)
    with pytest.raises(VmlinuxError, match="no DWARF"):
        VmlinuxLines(out)
