"""capstone disassembly of x86-64/arm64 code, kernel text and JITed BPF images."""

from __future__ import annotations

import glob
import os

import pytest

from pytest_lbr.cli.fetch_vmlinux import fetch_debian_dbg
from pytest_lbr.programs.lines import read_program
from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.disasm import (
    VmlinuxText,
    branch_instruction,
    call_targets,
    disassemble,
    disassemble_function,
    format_listing,
    instruction_at,
    jumps_out,
)
from pytest_lbr.symbols.vmlinux import VmlinuxError, VmlinuxLines
from tests.bpf.objects import bpf_object, require_root


def test_x86_64_and_arm64() -> None:
    x86 = disassemble(bytes.fromhex("55 4889e5 e8 00000000 c3"), 0x1000)
    assert [i.mnemonic for i in x86] == ["push", "mov", "call", "ret"]
    assert x86[2].addr == 0x1004 and x86[2].operands == "0x1009"
    arm = disassemble(bytes.fromhex("fd7bbfa9 02000094 c0035fd6"), 0x2000, "arm64")
    assert [i.mnemonic for i in arm] == ["stp", "bl", "ret"]
    assert arm[1].operands == "#0x200c"
    with pytest.raises(ValueError, match="no disassembler"):
        disassemble(b"\x00", 0, "mips")


def test_instruction_at_splits_variable_length_code() -> None:
    code = bytes.fromhex("55 4889e5 e8 00000000 c3")

    def read(a: int, n: int) -> bytes:
        return code[a - 0x1000 : a - 0x1000 + n]

    assert instruction_at(0x1004, 0x1000, read).mnemonic == "call"
    assert instruction_at(0x1002, 0x1000, read) is None  # inside `mov`, not a start


@pytest.fixture(scope="module")
def vmlinux_61() -> str:
    images = sorted(glob.glob("/boot/vmlinuz-6.1.0-*-amd64"))
    if not images:
        pytest.skip("no Debian 6.1 kernel image in /boot (bash ci/setup installs it)")
    release = os.path.basename(images[-1]).removeprefix("vmlinuz-")
    try:
        return fetch_debian_dbg(release)
    except (VmlinuxError, OSError) as exc:
        pytest.skip(f"cannot fetch linux-image-{release}-dbg with apt: {exc}")


def test_vmlinux_text_matches_its_symbols(vmlinux_61: str) -> None:
    vm = VmlinuxLines(vmlinux_61, cache=False)
    start = vm.symbol_address("vfs_write")
    (size,) = [z for s, z, n in zip(*vm.functions(), strict=True) if n == "vfs_write"]
    insns = disassemble(VmlinuxText(vmlinux_61).read(start, size), start)
    assert sum(i.size for i in insns) == size  # decodes the whole function, no garbage
    calls = [i for i in insns if i.mnemonic == "call"]
    assert calls, "vfs_write calls nothing?"
    frames = vm.lookup([calls[0].addr])[calls[0].addr]
    assert frames and frames[-1].function == "vfs_write"


def test_jited_bpf_program_disassembly() -> None:
    require_root()
    from pytest_lbr.bpf import BpfObject

    sym = get_symbolizer()
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        table = read_program(prog.fd)
        insns = disassemble_function(sym, table.funcs[0].start)
        assert insns[0].addr == table.funcs[0].start
        assert insns[-1].addr + insns[-1].size == table.funcs[0].end
        listing = format_listing(insns)
        assert "xdp_helpers.bpf.c:" in listing
        call = next(i for i in insns if i.mnemonic == "call")
        got = branch_instruction(sym, call.addr)
        assert got is not None and got.mnemonic == "call" and got.location.symbol == "xdp_helpers"


def test_only_keeps_the_named_mnemonics_of_the_same_decode() -> None:
    """`only` filters the decode, it does not re-synchronize it: the kept
    instructions are those of the full listing, in order."""
    # push rbp; call +0; mov rbp,rsp; jmp -2; ret
    code = bytes.fromhex("55 e8 00 00 00 00 48 89 e5 eb fe c3")
    full = disassemble(code, 0x1000)
    kept = disassemble(code, 0x1000, only=frozenset({"call", "jmp"}))
    assert kept == [i for i in full if i.mnemonic in ("call", "jmp")]
    assert [(i.addr, i.mnemonic) for i in kept] == [(0x1001, "call"), (0x1009, "jmp")]


def test_jumps_out_of_a_function_are_its_tail_calls() -> None:
    """x86-64 at 0x1000: call 0x2000; jmp +2 (inside); jmp 0x3000 (out: a tail call);
    arm64: b to inside and b out."""
    start = 0x1000
    code = bytes.fromhex("e8fb0f0000eb029090e9f21f0000")
    insns = disassemble(code, start)
    assert [i.mnemonic for i in insns] == ["call", "jmp", "nop", "nop", "jmp"]
    assert jumps_out(insns, start, start + len(code)) == [(0x1009, 0x3000)]
    assert call_targets(insns) == [(0x1000, 0x2000)]
    a64 = disassemble(bytes.fromhex("0100001400040014"), start, "arm64")  # b +4 (inside); b +0x1000
    assert jumps_out(a64, start, start + 8) == [(0x1004, 0x2004)]
