"""The running kernel's helper facts: names from BTF, implementations from the protos."""

from __future__ import annotations

import pytest

from pytest_lbr.kernel.helpers import helper_ids, helper_implementations
from pytest_lbr.symbols.kallsyms import KernelSymbols
from tests.bpf.objects import require_root

pytestmark = pytest.mark.kernel


def test_helper_names_come_from_the_kernel_s_btf() -> None:
    ids = helper_ids()
    assert ids[1] == "bpf_map_lookup_elem"
    assert ids[7] == "bpf_get_prandom_u32"
    assert ids[12] == "bpf_tail_call"
    assert "bpf_loop" in ids.values()


def test_implementations_are_read_from_the_bpf_func_protos() -> None:
    require_root()
    ks = KernelSymbols()

    def locate(addr: int) -> str | None:
        sym = ks.lookup(addr)
        return sym.name if sym is not None and sym.offset == 0 else None

    # The protos come from the symbol table's own read of kallsyms (one a session).
    implements, why = helper_implementations(helper_ids().values(), locate, listed=ks.protos)
    assert why == ""
    assert implements["bpf_user_rnd_u32"] == "bpf_get_prandom_u32"
    assert implements["bpf_ktime_get_ns"] == "bpf_ktime_get_ns"
    assert implements["bpf_map_lookup_elem"] == "bpf_map_lookup_elem"
    assert ks.protos  # the symbol table keeps them from its one read of kallsyms
