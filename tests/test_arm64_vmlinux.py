"""arm64 kernels: file:line and disassembly of Debian's arm64 debug vmlinux,
fetched on this x86-64 host the way `pytest-lbr fetch-vmlinux 6.1.0-NN-arm64` does."""

from __future__ import annotations

import re
import subprocess

import pytest

from pytest_lbr.cli.fetch_vmlinux import fetch_debian_dbg
from pytest_lbr.symbols.disasm import VmlinuxText, disassemble, instruction_at
from pytest_lbr.symbols.vmlinux import VmlinuxError, VmlinuxLines, sample_text_addresses

ARM64_APT = ["-o", "APT::Architectures::=amd64", "-o", "APT::Architectures::=arm64"]
EM_AARCH64 = 183


def _newest_arm64_release() -> str:
    """The release Debian's linux-image-arm64-dbg points at now (e.g. 6.1.0-56-arm64)."""
    try:
        subprocess.run(["apt-get", "-q", *ARM64_APT, "update"], capture_output=True, timeout=300)
        deps = subprocess.run(
            ["apt-cache", *ARM64_APT, "depends", "linux-image-arm64-dbg:arm64"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"apt cannot list Debian's arm64 packages: {exc}")
    found = re.search(r"linux-image-(\S+-arm64)-dbg", deps.stdout)
    if found is None:
        pytest.skip(f"apt knows no linux-image-arm64-dbg: {deps.stderr.strip()}")
    return found[1]


@pytest.fixture(scope="module")
def vmlinux_arm64() -> str:
    release = _newest_arm64_release()
    try:
        return fetch_debian_dbg(release)
    except (VmlinuxError, OSError) as exc:
        pytest.skip(f"cannot fetch linux-image-{release}-dbg:arm64 with apt: {exc}")


def _function(vm: VmlinuxLines, name: str) -> tuple[int, int]:
    starts, sizes, names = vm.functions()
    ((start, size),) = [(a, z) for a, z, n in zip(starts, sizes, names, strict=True) if n == name]
    return start, size


@pytest.mark.slow
def test_it_is_an_arm64_kernel(vmlinux_arm64: str) -> None:
    with open(vmlinux_arm64, "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == EM_AARCH64


def test_a_kernel_call_symbolizes_and_disassembles(vmlinux_arm64: str) -> None:
    vm = VmlinuxLines(vmlinux_arm64, cache=False)
    start, size = _function(vm, "vfs_write")
    assert vm.symbol_address("vfs_write") == start
    text = VmlinuxText(vmlinux_arm64)
    insns = disassemble(text.read(start, size), start, "arm64")
    assert sum(i.size for i in insns) == size and {i.size for i in insns} == {4}
    # vfs_write checks the range first (fs/read_write.c): its first call is rw_verify_area
    # (a `bl` whose target is that function's first instruction).
    calls = [i for i in insns if i.mnemonic == "bl"]
    verify, _ = _function(vm, "rw_verify_area")
    assert calls and calls[0].operands == f"#{verify:#x}"
    lines = vm.lookup([calls[0].addr, verify])
    assert lines[calls[0].addr][-1].function == "vfs_write"
    assert lines[calls[0].addr][-1].file == "fs/read_write.c"
    assert lines[verify][-1].function == "rw_verify_area"
    assert lines[verify][-1].file == "fs/read_write.c"
    assert lines[verify][-1].line < lines[calls[0].addr][-1].line  # defined above its caller
    # an LBR-style source address decodes to its branch (pytest-lbr trace --disasm)
    found = instruction_at(calls[0].addr, start, text.read, "arm64")
    assert found is not None and found.mnemonic == "bl"
    assert instruction_at(calls[0].addr + 2, start, text.read, "arm64") is None


@pytest.mark.slow
def test_both_line_readers_agree_on_arm64(vmlinux_arm64: str) -> None:
    # gcc writes .debug_aranges, so pyelftools (no llvm-symbolizer) reads arm64 lines
    # too; the two readers must agree as they do on the x86-64 kernel.
    llvm = VmlinuxLines(vmlinux_arm64, cache=False)
    addrs = sample_text_addresses(llvm, 300, seed=18, functions=10)
    want = llvm.lookup(addrs)
    got = VmlinuxLines(vmlinux_arm64, use_llvm=False, cache=False).lookup(addrs)
    assert all(want[a] for a in addrs), "llvm-symbolizer found no line for a sampled address"
    agree = sum(1 for a in addrs if got[a] == want[a])
    bad = [(hex(a), got[a], want[a]) for a in addrs if got[a] != want[a]][:5]
    assert agree >= 0.99 * len(addrs), f"{agree}/{len(addrs)} agree; first differences: {bad}"
