"""Which names exist, so a query about a name nothing has raises (symbols/known.py).

On the host's own kernel (root reads kallsyms and BTF); the traces are built from
real kernel names and a real program loaded from tests/bpf/long_names.bpf.o.
"""

from __future__ import annotations

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.model import Branch, Hit, Location, ProgramCalls, Trace, TraceQueryError
from pytest_lbr.symbols.known import TracerNames
from pytest_lbr.targets import parse_target
from tests.bpf.objects import bpf_object, require_root

TP_PROG = "getppid_counter_with_long_name"


def kernel_trace(known: TracerNames | None) -> Trace:
    """ksys_write -> vfs_write, as a kfunc trace records it."""
    src = Location(0xFFFFFFFF81000010, "ksys_write", 0x10)
    dst = Location(0xFFFFFFFF81000100, "vfs_write", 0)
    hit = Hit("kfunc:ksys_write", branches=[Branch(src, dst, "call")])
    return Trace(targets=["kfunc:ksys_write"], hits=[hit], known=known)


def test_helpers_kernel_functions_and_globs_exist() -> None:
    require_root()
    names = TracerNames([])
    assert names.exists("bpf_map_lookup_elem")
    assert names.exists("bpf_map_*")
    assert names.exists("vfs_write", kernel_only=True)
    assert not names.exists("bpf_map_lokup_elem")
    assert not names.exists("bpf_get_prandom_u32", kernel_only=True)  # a helper, no function
    assert "bpf_map_lookup_elem" in names.similar("bpf_map_lokup_elem")


def test_a_typo_raises_and_a_real_name_not_called_is_false() -> None:
    require_root()
    trace = kernel_trace(TracerNames([]))
    assert trace.called("vfs_write", by="ksys_write")
    assert not trace.called("vfs_read")  # exists, not called
    assert not trace.called("bpf_get_prandom_u32")  # a helper, not called
    assert not trace.called("vfs_write", by="ksys_read")  # a kernel function, not the caller
    with pytest.raises(TraceQueryError, match="nearest: .*vfs_write"):
        trace.called("vfs_wrte")
    with pytest.raises(TraceQueryError, match="by='no_such_function' names no program"):
        trace.called("vfs_write", by="no_such_function")
    with pytest.raises(TraceQueryError, match="'vfs_wrte' names no helper"):
        trace.has_path("ksys_write", "vfs_wrte")
    assert not trace.has_path("vfs_write", "ksys_write")  # both exist: wrong order
    with pytest.raises(TraceQueryError, match="names no BPF program"):
        trace.inlined("bpf_loop", by="ksys_write")


def test_a_trace_built_by_hand_checks_callers_against_its_own_names() -> None:
    trace = kernel_trace(None)
    assert not trace.called("anything_at_all")  # nothing to check a callee against
    with pytest.raises(TraceQueryError):
        trace.called("vfs_write", by="not_in_this_trace")


def test_a_long_program_name_and_its_15_bytes_name_one_program() -> None:
    jit = 0xFFFFFFFFC0001000
    prog = ProgramCalls(TP_PROG, 9, (TP_PROG,), (), kernel_name=TP_PROG[:15])
    src = Location(jit + 0x20, TP_PROG, 0x20, "bpf", program=prog)
    dst = Location(0xFFFFFFFF81000100, "htab_map_update_elem", 0, helper="bpf_map_update_elem")
    hit = Hit(f"prog:name:{TP_PROG}", branches=[Branch(src, dst, "call")])
    trace = Trace(targets=[f"prog:name:{TP_PROG}"], hits=[hit])
    assert set(trace.programs()) == {TP_PROG}
    for by in (TP_PROG, TP_PROG[:15]):
        assert trace.called("bpf_map_update_elem", by=by)
        assert not trace.inlined("bpf_map_update_elem", by=by)
    other = ProgramCalls(TP_PROG + "_v6", 10, (TP_PROG + "_v6",), (), kernel_name=TP_PROG[:15])
    src6 = Location(jit + 0x1020, TP_PROG + "_v6", 0x20, "bpf", program=other)
    hit.branches.append(Branch(src6, dst, "call"))
    with pytest.raises(TraceQueryError, match="15-byte name of 2 traced programs"):
        trace.called("bpf_map_update_elem", by=TP_PROG[:15])
    assert trace.called("bpf_map_update_elem", by=TP_PROG + "_v6")


def test_a_loaded_program_s_functions_exist_by_the_names_the_c_wrote() -> None:
    require_root()
    with BpfLoader() as bpf:
        obj = bpf.load(bpf_object("long_names"))
        prog = obj.programs["xdp_counts_packet_lengths"]
        names = TracerNames([parse_target(prog)])
        assert names.exists("remember_packet_length")  # a subprogram, from kallsyms
        assert not names.exists("remember_packet_length", kernel_only=True)
        (traced,) = names.traced()
        assert traced[:2] == ("xdp_counts_packet_lengths", "xdp_counts_pack")
        assert "remember_packet_length" in traced[2:]
