"""BPF programs come and go: the symbolizer never names an address after an unloaded program.

Runs on the host (root can load XDP programs there); the JIT addresses are real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_lbr.model import Location
from pytest_lbr.programs.lines import read_program
from pytest_lbr.symbols import Symbolizer, get_symbolizer
from tests.bpf.objects import bpf_object, require_root


def test_unloaded_program_is_forgotten_and_a_new_one_is_named_right() -> None:
    require_root()
    from pytest_lbr.bpf import BpfObject

    sym = get_symbolizer()
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        first = read_program(obj.programs["xdp_helpers"].fd)
        old_addrs = [a for a, _, _ in first.lines]
        assert {sym.locate_many(old_addrs)[a].symbol for a in old_addrs} <= {
            "xdp_helpers",
            "note_cpu",
        }
    # Unloaded: its addresses no longer resolve to it, even though we looked them up before.
    after = sym.locate_many(old_addrs)
    assert not any(loc.symbol in ("xdp_helpers", "note_cpu") for loc in after.values()), after
    # A different program (often JITed into the same freed space) is named by its own info.
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        cpu = obj.programs["xdp_cpu"]
        table = read_program(cpu.fd)
        addrs = [a for a, _, _ in table.lines]
        names = {sym.locate_many(addrs)[a].symbol for a in addrs}
        assert names == {"xdp_cpu"}, names


def test_a_program_is_named_from_its_own_info_without_reading_kallsyms_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session's first lookup in a program (the symbolizer made after the load, as in
    a test that loads its program, then traces it) reads the program's info, not the
    whole of /proc/kallsyms a second time."""
    require_root()
    from pytest_lbr.bpf import BpfObject

    with BpfObject(bpf_object("xdp_helpers")) as obj:
        sym = Symbolizer()
        reads: list[str] = []
        reload = sym.kallsyms.reload
        monkeypatch.setattr(sym.kallsyms, "reload", lambda: (reads.append("kallsyms"), reload()))
        table = read_program(obj.programs["xdp_cpu"].fd)
        addrs = [a for a, _, _ in table.lines]
        assert {loc.symbol for loc in sym.locate_many(addrs).values()} == {"xdp_cpu"}
        # A table read after the addresses were recorded (a trace's end): still the
        # program's own name, never kallsyms' bpf_prog_<tag>_<name>.
        later = Symbolizer()
        located = later.locate_many(addrs, recorded_by=later.kallsyms.read_at - 1)
        assert {loc.symbol for loc in located.values()} == {"xdp_cpu"}
    assert reads == []


def test_a_core_kernel_address_is_named_once(tmp_path: Path) -> None:
    """The core kernel's names (and lines) do not change while it runs: a trace after
    trace names the same call sites, each worked out the first time only."""
    saved = tmp_path / "kallsyms"
    saved.write_text(
        "ffffffff81000000 T _stext\nffffffff81000100 T start_kernel\n"
        "ffffffff81000200 T do_one_initcall\nffffffff81000300 T _etext\n"
    )
    sym = Symbolizer(vmlinux=str(tmp_path / "no-vmlinux"), kallsyms=str(saved))
    addrs = [0xFFFFFFFF81000104, 0xFFFFFFFF81000210]
    first = sym.locate_many(addrs)
    assert first[addrs[0]] == Location(addrs[0], "start_kernel", 4)
    assert sym.core_named == 2
    again = sym.locate_many([*addrs, 0xFFFFFFFF81000108])
    assert {a: again[a] for a in addrs} == first
    assert again[0xFFFFFFFF81000108] == Location(0xFFFFFFFF81000108, "start_kernel", 8)
    assert sym.core_named == 3  # only the new one
