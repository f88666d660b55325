"""BPF programs come and go: the symbolizer never names an address after an unloaded program.

Runs on the host (root can load XDP programs there); the JIT addresses are real.
"""

from __future__ import annotations

from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.bpfprog import read_program
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
