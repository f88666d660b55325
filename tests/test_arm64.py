"""arm64: symbols and disassembly of arm64 ELF built on this host.

The LBR selftest's arm64 answer is "not available" (no bpf_get_branch_snapshot for
BRBE in mainline); what arm64 users get is the graph backend, whose traces need
arm64 symbols and disassembly. These run on any host with clang and an aarch64
linker (Debian: binutils-aarch64-linux-gnu).
"""

from __future__ import annotations

from pathlib import Path

import pytest

INLINE_C = Path(__file__).parent / "data" / "inline.c"


def _arm64_elf(tmp: Path, *flags: str) -> Path:
    import shutil
    import subprocess

    if shutil.which("clang") is None:
        pytest.skip("clang is not installed")
    out = tmp / "inline.arm64"
    cmd = ["clang", "--target=aarch64-linux-gnu", "-g", "-O2", "-gdwarf-5", "-ffreestanding"]
    cmd += ["-nostdlib", "-static", "-Wl,-e,main", *flags, "-o", str(out), str(INLINE_C)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0 and "linker" in res.stderr:
        pytest.skip(f"no aarch64 linker (apt-get install binutils-aarch64-linux-gnu): {res.stderr}")
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def arm64_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # clang writes .debug_aranges only when asked; gcc (Debian's kernels) always does.
    return _arm64_elf(tmp_path_factory.mktemp("arm64"), "-gdwarf-aranges")


def test_arm64_elf_is_arm64(arm64_elf: Path) -> None:
    from pytest_lbr.capture.hooks.tracer_object import object_arch

    header = arm64_elf.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    assert object_arch("aarch64") == "arm64"


@pytest.mark.parametrize("use_llvm", [False, True], ids=["pyelftools", "llvm-symbolizer"])
def test_arm64_lines_and_inlined_frames(arm64_elf: Path, use_llvm: bool) -> None:
    from pytest_lbr.symbols.vmlinux import VmlinuxLines

    vm = VmlinuxLines(arm64_elf, use_llvm=use_llvm, cache=False)
    if use_llvm and vm._llvm is None:
        pytest.skip("llvm-symbolizer is not installed (Debian package llvm)")
    starts, sizes, names = vm.functions()
    size = dict(zip(names, sizes, strict=True))["compute"]
    start = vm.symbol_address("compute")
    assert start is not None and start % 4 == 0  # A64 instructions are 4 bytes, aligned
    frames = vm.lookup(range(start, start + size, 4))
    chains = [f for f in frames.values() if f]
    assert len(chains) == size // 4, "every instruction of compute() has a line"
    deepest = max(chains, key=len)
    # square() inlined into sum_squares() inlined into compute(), as on x86-64
    assert [f.function for f in deepest] == ["square", "sum_squares", "compute"]
    assert all(f.file.endswith("inline.c") for f in deepest)
    assert deepest[0].line == 4 and deepest[1].line == 9 and deepest[2].line in (15, 16)


def test_arm64_both_line_readers_agree(arm64_elf: Path) -> None:
    from pytest_lbr.symbols.vmlinux import VmlinuxLines

    llvm = VmlinuxLines(arm64_elf, cache=False)
    if llvm._llvm is None:
        pytest.skip("llvm-symbolizer is not installed (Debian package llvm)")
    py = VmlinuxLines(arm64_elf, use_llvm=False, cache=False)
    starts, sizes, _ = llvm.functions()
    addrs = [a for s, z in zip(starts, sizes, strict=True) for a in range(s, s + z, 4)]
    assert addrs and py.lookup(addrs) == llvm.lookup(addrs)


@pytest.mark.xfail(
    strict=True,
    reason="symbols/dwarf.py finds a unit through .debug_aranges only; clang omits them "
    "unless -gdwarf-aranges (x86-64 too), so without llvm-symbolizer such a binary has no lines",
)
def test_arm64_lines_without_aranges(tmp_path: Path) -> None:
    from pytest_lbr.symbols.vmlinux import VmlinuxLines

    elf = _arm64_elf(tmp_path)
    vm = VmlinuxLines(elf, use_llvm=False, cache=False)
    start = vm.symbol_address("compute")
    assert start is not None
    assert vm.lookup([start])[start]


def test_arm64_disassembly_of_the_elf(arm64_elf: Path) -> None:
    from pytest_lbr.symbols.disasm import VmlinuxText, disassemble, instruction_at
    from pytest_lbr.symbols.elf import ElfFunctions
    from pytest_lbr.symbols.vmlinux import VmlinuxLines

    funcs = ElfFunctions(arm64_elf)
    main_at, compute_at = funcs.address("main"), funcs.address("compute")
    _, sizes, names = VmlinuxLines(arm64_elf, cache=False).functions()
    text = VmlinuxText(str(arm64_elf))
    code = text.read(main_at, dict(zip(names, sizes, strict=True))["main"])
    insns = disassemble(code, main_at, "arm64")
    assert sum(i.size for i in insns) == len(code) and {i.size for i in insns} == {4}
    (call,) = [i for i in insns if i.mnemonic in ("bl", "b")]  # main calls compute (or tail-calls)
    assert call.operands == f"#{compute_at:#x}"
    assert insns[-1].mnemonic in ("ret", "b")
    # a branch source address decodes to the branch itself (pytest-lbr trace --disasm)
    found = instruction_at(call.addr, main_at, text.read, "arm64")
    assert found is not None and found.mnemonic == call.mnemonic
    assert instruction_at(call.addr + 2, main_at, text.read, "arm64") is None


def _a64(*words: int) -> bytes:
    return b"".join(w.to_bytes(4, "little") for w in words)


def test_arm64_jit_helper_calls_are_found() -> None:
    # The arm64 BPF JIT calls a helper as emit_call() does (arch/arm64/net/bpf_jit_comp.c):
    # movn + two movk build the address in x10, then blr x10. The selftest's JIT lines
    # verdict finds its helper calls this way on arm64.
    from pytest_lbr.symbols.disasm import call_targets, disassemble

    helper, start, x10 = 0xFFFF80000812ABCC, 0xFFFF800010000000, 10
    movn = 0x92800000 | (~helper & 0xFFFF) << 5 | x10
    movk16 = 0xF2800000 | 1 << 21 | (helper >> 16 & 0xFFFF) << 5 | x10
    movk32 = 0xF2800000 | 2 << 21 | (helper >> 32 & 0xFFFF) << 5 | x10
    blr_x10, bl_16, mov_x10_x0 = 0xD63F0000 | x10 << 5, 0x94000004, 0xAA0003E0 | x10
    code = _a64(movn, movk16, movk32, blr_x10, bl_16, mov_x10_x0, blr_x10)
    insns = disassemble(code, start, "aarch64")
    assert [i.mnemonic for i in insns] == ["mov", "movk", "movk", "blr", "bl", "mov", "blr"]
    # the last blr goes through x10 after it was overwritten: its target is unknown
    assert call_targets(insns, "aarch64") == [(start + 12, helper), (start + 16, start + 32)]
