"""Which names exist, so a query about a name nothing has raises (symbols/known.py).

On the host's own kernel (root reads kallsyms and BTF); the traces are built from
real kernel names and a real program loaded from tests/bpf/long_names.bpf.o.
"""

from __future__ import annotations

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.model import (
    Branch,
    HelperCall,
    Hit,
    Location,
    ProgramCalls,
    Trace,
    TraceQueryError,
)
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


class _Traced:
    """What a tracer knows of its program targets (`KnownNames`), given."""

    def __init__(self, *programs: ProgramCalls) -> None:
        self.programs = programs

    def traced(self) -> list[tuple[str, ...]]:
        return [(p.program, p.kernel_name, *p.functions) for p in self.programs]

    def exists(self, pattern: str, *, kernel_only: bool = False) -> bool:
        return not kernel_only and pattern.startswith("bpf_")

    def similar(self, name: str) -> list[str]:
        return []

    def calls(self) -> list[ProgramCalls]:
        return list(self.programs)


def _calls(*fates: tuple[str, str]) -> tuple[HelperCall, ...]:
    return tuple(HelperCall(helper, fate) for helper, fate in fates)


def test_a_trace_without_its_programs_code_answers_inlined_from_their_tables() -> None:
    """A program that did not run, or a trace without branches (LBR on software
    events): the verifier's work is a fact of the loaded program all the same."""
    stamp = ProgramCalls(
        "cpu_stamp", 7, ("cpu_stamp",),
        _calls(("bpf_get_smp_processor_id", "inlined"), ("bpf_trace_printk", "removed"),
               ("bpf_map_update_elem", "call")),
    )  # fmt: skip
    trace = Trace(targets=["prog:7"], known=_Traced(stamp))
    assert trace.inlined("bpf_get_smp_processor_id", by="cpu_stamp")
    assert trace.inlined("bpf_get_smp_processor_id")
    assert trace.removed("bpf_trace_printk", by="cpu_stamp")
    assert not trace.inlined("bpf_map_update_elem", by="cpu_stamp")
    assert not trace.removed("bpf_get_smp_processor_id")
    with pytest.raises(TraceQueryError, match="nearest: cpu_stamp"):
        trace.inlined("bpf_get_smp_processor_id", by="cpu_stmp")


def test_inlined_cannot_be_told_of_a_program_loaded_elsewhere_or_an_unknown_fate() -> None:
    elsewhere = ProgramCalls(
        "handle_exec", 8, ("handle_exec",), _calls(("bpf_ringbuf_submit", "call")), written=False
    )
    unsure = ProgramCalls("stamp", 9, ("stamp",), _calls(("bpf_jiffies64", "unknown")))
    trace = Trace(targets=["prog:8", "prog:9"], known=_Traced(elsewhere, unsure))
    with pytest.raises(TraceQueryError, match="handle_exec was loaded outside the bpf fixture"):
        trace.inlined("bpf_get_smp_processor_id", by="handle_exec")
    with pytest.raises(TraceQueryError, match="cannot tell inlined from removed"):
        trace.removed("bpf_jiffies64", by="stamp")
    assert not trace.inlined("bpf_map_lookup_elem", by="stamp")  # no call of it was written
    with pytest.raises(TraceQueryError, match="cannot tell whether 'bpf_loop' was inlined"):
        trace.inlined("bpf_loop")  # any program: handle_exec's calls are not known


def test_a_real_program_that_did_not_run_is_asked_through_its_tables() -> None:
    require_root()
    with BpfLoader() as bpf:
        prog = bpf.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
        targets = [parse_target(prog)]
        known = TracerNames(targets, bpf.written)
        trace = Trace(targets=[str(t) for t in targets], known=known)
        assert not trace.programs()  # no record of its code
        assert not trace.inlined("bpf_csum_diff", by="xdp_helpers")  # a call it still makes
        assert not trace.removed("bpf_xdp_adjust_head", by="xdp_helpers")
        with pytest.raises(TraceQueryError, match="nearest: xdp_helpers"):
            trace.inlined("bpf_csum_diff", by="xdp_helper")
