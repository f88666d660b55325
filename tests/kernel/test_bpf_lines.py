"""A loaded BPF program's JIT addresses resolve to its C source file and lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_lbr.programs.lines import read_program, read_span
from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.kallsyms import KernelSymbols
from tests.bpf.objects import bpf_object, require_root

pytestmark = pytest.mark.kernel

SRC = Path(__file__).resolve().parents[1] / "bpf" / "xdp_helpers.bpf.c"
TAIL_LOOP = Path(__file__).resolve().parents[2] / "examples" / "tail_loop" / "build"


def _body_lines(name: str) -> range:
    """Lines of the C function `name`, from its signature to its closing brace."""
    text = SRC.read_text().splitlines()
    first = next(i for i, s in enumerate(text) if re.search(rf"\b{name}\(", s) and "{" not in s)
    last = next(i for i in range(first, len(text)) if text[i] == "}")
    return range(first + 1, last + 2)


def test_jit_addresses_resolve_to_c_source_lines() -> None:
    require_root()
    from pytest_lbr.bpf import BpfObject

    # The symbolizer exists before the program is loaded: it must catch up lazily.
    sym = get_symbolizer()
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        prog = obj.programs["xdp_helpers"]
        table = read_program(prog.fd)
        assert [f.name for f in table.funcs] == ["xdp_helpers", "note_cpu"]
        # Independent of prog info: kallsyms names the same JIT start address.
        ks = KernelSymbols()
        assert ks.lookup(table.funcs[0].start).name == f"bpf_prog_{table.tag}_xdp_helpers"

        addrs = [a for a, _, _ in table.lines]
        locs = sym.locate_many(addrs)
        src_text = SRC.read_text().splitlines()
        bodies = {"xdp_helpers": _body_lines("xdp_helpers"), "note_cpu": _body_lines("note_cpu")}
        real_lines = 0
        for a in addrs:
            loc = locs[a]
            assert loc.module == "bpf" and loc.symbol in bodies, loc
            assert loc.file is not None and loc.file.endswith("tests/bpf/xdp_helpers.bpf.c"), loc
            if loc.line:  # clang marks compiler-made code with line 0
                real_lines += 1
                assert loc.line in bodies[loc.symbol], f"{loc}: outside {loc.symbol}()"
                assert src_text[loc.line - 1].strip(), f"{loc}: a blank source line"
        assert real_lines >= len(addrs) // 2
        # An address inside an instruction range (not a line start) floors to its line.
        mid = table.funcs[1].start + 1
        loc = sym.locate(mid)
        assert loc.symbol == "note_cpu" and loc.offset == 1 and loc.line in bodies["note_cpu"]
        assert str(loc).startswith("note_cpu+0x1 (") and "xdp_helpers.bpf.c:" in str(loc)


def test_only_the_program_an_address_falls_in_is_read() -> None:
    """Four programs loaded, an address in one: only that one's tables are read. A
    program unloaded between the refresh and its first address gives no location."""
    require_root()
    from pytest_lbr.bpf import BpfObject

    sym = get_symbolizer()
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        ids = {name: p.id for name, p in obj.programs.items()}
        assert len(ids) == 4, ids
        spans = {name: read_span(p.fd) for name, p in obj.programs.items()}
        start = spans["xdp_helpers"].functions[0][0]
        loc = sym.locate(start + 1)
        assert loc.symbol == "xdp_helpers" and loc.line, loc
        assert loc.program is not None and loc.program.calls, loc
        assert set(ids.values()) <= set(sym.bpf.spans)
        assert set(ids.values()) & set(sym.bpf.programs) == {ids["xdp_helpers"]}
        assert sym.bpf.spans[ids["xdp_cpu"]].functions == spans["xdp_cpu"].functions
        # Asked for by id: read now, once.
        cpu = sym.bpf.read(ids["xdp_cpu"])
        assert cpu is not None and [f.name for f in cpu.funcs] == ["xdp_cpu"]
        assert sym.bpf.read(ids["xdp_cpu"]) is cpu
    cpu_addr = spans["xdp_cpu"].functions[0][0]
    lru_addr = spans["xdp_lru"].functions[0][0]
    lru = ids["xdp_lru"]
    # Unloaded after the refresh that saw it, before any address fell in it.
    assert lru in sym.bpf.spans and lru not in sym.bpf.programs
    assert sym.bpf.locate(lru_addr) is None
    assert lru not in sym.bpf.spans and sym.bpf.read(lru) is None
    # Read before the unload: forgotten at the next refresh, never named again.
    assert sym.locate(cpu_addr).symbol != "xdp_cpu"
    assert ids["xdp_cpu"] not in sym.bpf.programs


def test_a_tail_call_target_read_alone_knows_its_callers() -> None:
    """Its callers' program arrays are read without reading the callers' tables."""
    require_root()
    from pytest_lbr.bpf import BpfObject

    sym = get_symbolizer()
    with BpfObject(TAIL_LOOP / "tail_loop.bpf.o") as obj:
        obj.maps["stages"].update(0, obj.programs["stage2"].fd)
        stage2 = read_span(obj.programs["stage2"].fd)
        loc = sym.locate(stage2.functions[0][0])
        assert loc.symbol == "stage2" and loc.program is not None, loc
        assert loc.program.tail_called_by == ("entry",)
        assert obj.programs["entry"].id not in sym.bpf.programs
        # The array emptied: the next refresh says so.
        obj.maps["stages"].delete(0)
        sym.bpf.refresh()
        calls = sym.bpf.programs[obj.programs["stage2"].id].calls
        assert calls is not None and calls.tail_called_by == ()


@pytest.mark.allow_skip
def test_live_kernel_addresses_get_lines_with_kaslr() -> None:
    """With the running kernel's debug vmlinux (6.1 guest: the cached Debian -dbg one)."""
    sym = get_symbolizer()
    if sym.lines is None:
        pytest.skip(f"no debug vmlinux for this kernel: {sym.vmlinux_status}")
    assert "build-id" in sym.vmlinux_status
    start = sym.kallsyms.address_of("vfs_write")
    assert start is not None
    # Independent check of the KASLR offset: the ELF symbol table agrees with kallsyms.
    assert sym.lines.function_at(start - sym.kaslr_offset) == ("vfs_write", 0)
    locs = sym.locate_many(range(start, start + 64))
    assert all(loc.symbol == "vfs_write" for loc in locs.values())
    files = {loc.file for loc in locs.values()}
    assert "fs/read_write.c" in files, files
    assert str(locs[start]).startswith("vfs_write+0x0 (fs/read_write.c:")


def test_a_symbol_table_read_after_the_trace_is_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """JIT code no program holds (here the fexit trampoline the LBR path attaches to a
    program) makes the symbolizer read kallsyms again, unless its table was read
    after every address was recorded (`recorded_by`, a trace's end)."""
    import time

    from pytest_lbr.bpf import BpfLoader
    from pytest_lbr.symbols import Symbolizer
    from pytest_lbr.tracer import Tracer

    require_root()
    with (
        BpfLoader().load(bpf_object("xdp_helpers")) as obj,
        Tracer(backend="lbr", pmu="software") as tracer,
    ):
        prog = obj.programs["xdp_helpers"]
        with tracer.trace(prog):
            prog.run(data=bytes(range(1, 65)))
            recorded = time.monotonic()
            sym = Symbolizer()
            ks = sym.kallsyms
            # The process's one table (`live_kallsyms`), read after the trampoline was made.
            ks.reload()
            # The trampoline's image, not the core kernel's bpf_trampoline_* functions.
            # 6.1 makes trampolines where modules live, and kallsyms once listed a module's
            # freed `veth_init` at a live trampoline's address: lookup prefers the BPF name.
            tramps = [
                a
                for a, n, m in zip(ks.starts, ks.names, ks.modules, strict=True)
                if n.startswith("bpf_trampoline_") and m == "bpf"
            ]
            assert tramps, "no bpf_trampoline_* in kallsyms while a program's fexit is attached"
            addrs = [tramps[0] + 1, tramps[0] + 2]
            named = ks.lookup(addrs[0])
            assert named is not None and named.name.startswith("bpf_trampoline_"), named
            # Only the symbolizer told that the table was read after the addresses were
            # recorded (recorded_by) trusts it; another reads kallsyms again, once.
            told, untold = sym, Symbolizer()
            assert untold.kallsyms is ks
            reads: list[str] = []
            monkeypatch.setattr(ks, "reload", lambda r=ks.reload: (reads.append("read"), r()))
            found = told.locate_many(addrs, recorded_by=recorded)
            assert found[addrs[0]].symbol == named.name
            assert reads == []
            found = untold.locate_many(addrs)
            assert found[addrs[0]].symbol == named.name
            assert reads == ["read"]
