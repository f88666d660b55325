"""The call graph a system-wide graph trace is narrowed to (`capture.graph.narrow`),
read from Debian's real 6.1 debug vmlinux: its symbol table as kallsyms would list
it (`nm`, the same format and the same t/T types), its code bytes as /proc/kcore
would give them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.capture.graph.narrow import NARROW_LIMIT, callee_closure, image_roots
from pytest_lbr.symbols.disasm import VmlinuxText, call_targets, disassemble
from pytest_lbr.symbols.kallsyms import KernelSymbols
from tests.symbols.test_disasm import vmlinux_61  # noqa: F401 -- the fixture

ROOT = "htab_map_update_elem"


@pytest.fixture(scope="module")
def kernel(vmlinux_61: str, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """(kallsyms-format symbols, code reader) of the 6.1 vmlinux."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils; bash ci/setup installs it)")
    path = Path(tmp_path_factory.mktemp("kallsyms")) / "kallsyms"
    with open(path, "w") as out:
        subprocess.run([nm, "--defined-only", vmlinux_61], stdout=out, check=True)
    return KernelSymbols(str(path)), VmlinuxText(vmlinux_61).read


def test_depth_0_is_the_roots_only(kernel) -> None:
    symbols, read = kernel
    root = symbols.address_of(ROOT)
    assert root is not None
    found = callee_closure([root], symbols, read, "x86_64", lambda n: True, depth=0)
    assert found.functions == (ROOT,) and not found.truncated


def test_each_level_adds_what_the_one_above_calls(kernel) -> None:
    symbols, read = kernel
    root = symbols.address_of(ROOT)
    assert root is not None
    one = callee_closure([root], symbols, read, "x86_64", lambda n: True, depth=1)
    two = callee_closure([root], symbols, read, "x86_64", lambda n: True, depth=2)
    # The update allocates its element in a static function (kernel/bpf/hashtab.c).
    assert "alloc_htab_elem" in one.functions
    assert set(one.functions) < set(two.functions)
    assert two.functions[: len(one.functions)] == one.functions  # breadth first
    # Depth 1 is the static functions the root's code calls directly; the global
    # ones (the bucket lock's _raw_spin_unlock) run everywhere and are left out.
    end = symbols.end_of(root)
    assert end is not None
    insns = disassemble(read(root, end - root), root, "x86_64")
    starts = {t for _, t in call_targets(insns) if symbols.lookup(t).offset == 0}
    local = {symbols.lookup(t).name for t in starts if symbols.is_local(t)}
    assert set(one.functions) - {ROOT} <= local and "alloc_htab_elem" in local
    called = {symbols.lookup(t).name for t in starts}
    assert "_raw_spin_unlock" in called and "_raw_spin_unlock" not in two.functions


def test_untraceable_functions_are_left_out_and_the_limit_holds(kernel) -> None:
    symbols, read = kernel
    root = symbols.address_of(ROOT)
    assert root is not None
    found = callee_closure([root], symbols, read, "x86_64", lambda n: n != ROOT, depth=1)
    assert ROOT not in found.functions and found.functions  # its callees still followed
    cut = callee_closure([root], symbols, read, "x86_64", lambda n: True, depth=2, limit=3)
    assert len(cut.functions) == 3 and cut.truncated
    assert "the first" in cut.note("prog:name:x") and str(NARROW_LIMIT) in cut.note("x")


def test_a_jited_image_calls_are_its_roots() -> None:
    # x86-64: two functions concatenated, each calling a kernel address (call rel32).
    first = bytes.fromhex("e8 fb 0f 00 00 c3")  # at 0x1000: call 0x2000; ret
    second = bytes.fromhex("e8 fb 1f 00 00 c3")  # at 0x3000: call 0x5000; ret
    roots = image_roots(first + second, [(0x1000, 6), (0x3000, 6)], "x86_64")
    assert roots == {0x2000, 0x5000}


def test_a_root_the_tracer_cannot_patch_is_stood_in_for_by_all_it_calls(kernel) -> None:
    # bpf_trace_printk (what bpf_printk calls) is in kernel/trace/, built without -pg:
    # only its callees can be recorded, and they are global (kernel/bpf/helpers.c).
    symbols, read = kernel
    root = symbols.address_of("bpf_trace_printk")
    assert root is not None
    untraceable = {"bpf_trace_printk"}
    found = callee_closure([root], symbols, read, "x86_64", lambda n: n not in untraceable, depth=1)
    assert "bpf_bprintf_prepare" in found.functions, found.functions
    assert not symbols.is_local(symbols.address_of("bpf_bprintf_prepare") or 0)
    # A root the tracer can patch keeps the rule: only static functions below it.
    patched = callee_closure([root], symbols, read, "x86_64", lambda n: True, depth=1)
    assert "bpf_bprintf_prepare" not in patched.functions
