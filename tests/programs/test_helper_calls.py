"""Helper names as the BPF C writes them: queries, text, failure messages, golden diffs.

The traces are built the way the symbolizer names them in the 6.1 and 6.12
guests (examples/tail_loop, examples/xdp_counter): kernel functions carry the
helper they implement, BPF code carries its program's helper calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_lbr.assertions import explain_called
from pytest_lbr.golden.compare import Comparison
from pytest_lbr.kernel.helpers import verifier_inlines
from pytest_lbr.model import UNSEEN_CALLER, Branch, HelperCall, Hit, Location, ProgramCalls, Trace
from pytest_lbr.programs.helper_calls import Facts

ENTRY = ProgramCalls(
    "entry",
    7,
    ("entry", "loop_cb", "sub_stamp"),
    (
        HelperCall("bpf_loop", "inlined", None, "loop_cb"),
        HelperCall("bpf_tail_call", "tail call"),
        HelperCall("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32"),
        HelperCall("bpf_ktime_get_ns", "call", "bpf_ktime_get_ns"),
    ),
)
STAGE2 = ProgramCalls(
    "stage2",
    6,
    ("stage2",),
    (HelperCall("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32"),),
    tail_called_by=("entry",),
)


def bpf(sym: str, off: int, prog: ProgramCalls) -> Location:
    return Location(0xFFFFFFFFC0048000 + off, sym, off, "bpf", program=prog)


def kernel(sym: str, helper: str | None = None) -> Location:
    return Location(0xFFFFFFFF9768F870, sym, 0, None, helper=helper)


RND = kernel("bpf_user_rnd_u32", "bpf_get_prandom_u32")
KTIME = kernel("bpf_ktime_get_ns", "bpf_ktime_get_ns")


def tail_loop_trace() -> Trace:
    """examples/tail_loop's trace of `entry`, as the 6.12 guest recorded it."""
    loop_cb, sub = bpf("loop_cb", 0x1D, ENTRY), bpf("sub_stamp", 0x1D, ENTRY)
    stage2 = bpf("stage2", 0x19, STAGE2)
    branches = [
        Branch(loop_cb, RND, "call"),
        Branch(RND, loop_cb, "ret"),
        Branch(loop_cb, RND, "call"),
        Branch(RND, loop_cb, "ret"),
        Branch(sub, KTIME, "call"),
        Branch(KTIME, sub, "ret"),
        Branch(UNSEEN_CALLER, bpf("stage2", 0, STAGE2), "unseen"),
        Branch(stage2, RND, "call"),
        Branch(RND, stage2, "ret"),
        Branch(bpf("stage2", 0, STAGE2), UNSEEN_CALLER, "ret"),
    ]
    return Trace(targets=["prog:name:entry"], hits=[Hit("prog:name:entry", branches=branches)])


def test_helpers_match_by_the_name_the_c_wrote_and_by_the_kernel_name() -> None:
    t = tail_loop_trace()
    assert t.called("bpf_get_prandom_u32", by="loop_cb")
    assert t.called("bpf_user_rnd_u32", by="loop_cb")
    assert t.called("bpf_get_*", by="stage2")
    assert not t.called("bpf_get_prandom_u32", by="sub_stamp")
    assert t.has_path("bpf_get_prandom_u32", "bpf_ktime_get_ns", "stage2")
    assert not t.has_path("bpf_ktime_get_ns", "bpf_loop")
    # functions() keeps the kernel's names.
    assert "bpf_user_rnd_u32" in t.functions()
    assert "bpf_get_prandom_u32" not in t.functions()


def test_the_text_names_both() -> None:
    text = tail_loop_trace().edges()
    assert "loop_cb+0x1d -> bpf_user_rnd_u32+0x0 [bpf_get_prandom_u32]" in text
    # A helper whose implementation has its own name is not repeated.
    assert "bpf_ktime_get_ns+0x0 [" not in text


def test_the_tree_names_both_and_puts_each_call_under_the_function_that_made_it() -> None:
    lines = str(tail_loop_trace()).splitlines()
    tree = lines[lines.index(next(ln for ln in lines if ln.startswith("Hit at"))) + 1 :]
    assert tree == [
        "entry",
        "  loop_cb (entry not recorded)",
        "    bpf_get_prandom_u32 \u2192 bpf_user_rnd_u32 \u00d72",
        "  sub_stamp (entry not recorded)",
        "    bpf_ktime_get_ns",
        "  stage2 (tail call from entry)",
        "    bpf_get_prandom_u32 \u2192 bpf_user_rnd_u32",
    ]


def test_a_tail_call_reads_as_one_and_counts_as_a_call() -> None:
    t = tail_loop_trace()
    assert "\nentry -> stage2+0x0 (tail call)\n" in t.edges()
    assert "(unseen caller) -> stage2" not in t.edges()
    # Its return goes where entry was called from: not an unseen caller.
    assert t.edges().endswith("\nstage2+0x0 -> the caller of entry (end of the tail call)"), str(t)
    assert "(unseen caller)" not in t.edges()
    assert t.called("stage2", by="entry")
    assert not t.called("stage2", by="loop_cb")


def test_inlined_asks_the_program_s_translated_calls() -> None:
    t = tail_loop_trace()
    assert t.inlined("bpf_loop", by="entry")
    assert t.inlined("bpf_loop")
    assert not t.inlined("bpf_loop", by="stage2")
    assert not t.inlined("bpf_get_prandom_u32")
    assert not t.called("bpf_loop")
    assert set(t.programs()) == {"entry", "stage2"}


def test_a_failed_called_on_an_inlined_helper_says_so() -> None:
    text = explain_called(tail_loop_trace(), "bpf_loop", by="entry")
    assert text.splitlines()[1] == (
        "  bpf_loop: inlined by this kernel's verifier in entry;"
        " its callback loop_cb made 2 call(s) in this trace"
    )
    assert "no call into bpf_loop at all" not in text
    # What the program's own functions called, helpers named beside.
    assert "  entry's function loop_cb called: bpf_user_rnd_u32 [bpf_get_prandom_u32]" in text
    assert "  entry's function sub_stamp called: bpf_ktime_get_ns" in text
    # Not inlined anywhere: the old wording.
    assert "no call into bpf_xdp_adjust_head at all" in explain_called(
        tail_loop_trace(), "bpf_xdp_adjust_head"
    )


def test_golden_diffs_show_the_helper_beside_the_kernel_name() -> None:
    cmp = Comparison(
        ["hit prog:name:xdp_count", "xdp_count -> __htab_map_lookup_elem"],
        ["hit prog:name:xdp_count", "xdp_count -> bpf_user_rnd_u32"],
        Path("test_counter.lbr"),
        {
            "bpf_user_rnd_u32": "bpf_get_prandom_u32",
            "__htab_map_lookup_elem": "bpf_map_lookup_elem",
        },
    )
    diff = cmp.diff().splitlines()
    assert "-xdp_count -> __htab_map_lookup_elem   [bpf_map_lookup_elem]" in diff
    assert "+xdp_count -> bpf_user_rnd_u32   [bpf_get_prandom_u32]" in diff
    assert " hit prog:name:xdp_count" in diff


# -- aligning written and translated calls, on what the 6.1 and 6.12 guests gave --

DATA = Path(__file__).resolve().parents[1] / "data"


def guest_programs(kernel: str) -> dict[str, ProgramCalls]:
    """examples' programs as tests/data/helpers-<kernel>.json recorded them in a guest
    (objects' and translated instructions, the kallsyms names of the called
    addresses, the helper enum and the bpf_*_proto implementations)."""
    import json

    from pytest_lbr.programs.helper_calls import ProgramCode, describe_calls

    d = json.loads((DATA / f"helpers-{kernel}.json").read_text())
    names = {int(a): n for a, n in d["symbols"].items()}
    ids = {int(k): v for k, v in d["helper_ids"].items()}
    out = {}
    for p in d["programs"]:
        code = ProgramCode(
            p["name"],
            1,
            tuple(p["functions"]),
            bytes.fromhex(p["xlated"]),
            bytes.fromhex(p["written"]),
        )
        out[p["name"]] = describe_calls(code, d["call_base"], names.get, ids, facts(d))
    return out


def facts(d: dict[str, Any], protos: dict[str, str] | None = None) -> Facts:
    """The kernel-wide facts a recorded guest gave (its release for the inlined helpers)."""
    release = d["kernel"]
    return Facts(
        d["implements"] if protos is None else protos,
        inlines=lambda helper: verifier_inlines(helper, release, "x86_64"),
    )


def fates(prog: ProgramCalls) -> list[tuple[str, str, str | None, str | None]]:
    return [(c.helper, c.fate, c.function, c.callback) for c in prog.calls]


def test_hash_maps_are_rewritten_array_lookups_inlined_on_both_kernels() -> None:
    for kernel in ("6.1", "6.12"):
        assert fates(guest_programs(kernel)["xdp_count"]) == [
            ("bpf_map_lookup_elem", "rewritten", "__htab_map_lookup_elem", None),
            ("bpf_map_update_elem", "rewritten", "htab_map_update_elem", None),
            ("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32", None),
            ("bpf_map_lookup_elem", "inlined", None, None),
        ], kernel


def test_bpf_loop_is_inlined_with_its_callback_and_the_tail_call_kept() -> None:
    for kernel in ("6.1", "6.12"):
        assert fates(guest_programs(kernel)["entry"]) == [
            ("bpf_loop", "inlined", None, "loop_cb"),
            ("bpf_tail_call", "tail call", None, None),
            ("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32", None),
            ("bpf_ktime_get_ns", "call", "bpf_ktime_get_ns", None),
        ], kernel


def test_bpf_get_smp_processor_id_is_a_call_on_6_1_and_inlined_on_6_12() -> None:
    first = ("bpf_get_smp_processor_id", "call", "bpf_get_smp_processor_id", None)
    assert fates(guest_programs("6.1")["cpu_stamp"])[0] == first
    assert fates(guest_programs("6.12")["cpu_stamp"])[0] == (
        "bpf_get_smp_processor_id",
        "inlined",
        None,
        None,
    )
    assert guest_programs("6.12")["cpu_stamp"].inlined("bpf_get_smp_processor_id")
    assert not guest_programs("6.1")["cpu_stamp"].inlined("bpf_get_*")


def test_the_implementations_come_from_the_kernel_s_protos() -> None:
    import json

    for kernel in ("6.1", "6.12"):
        d = json.loads((DATA / f"helpers-{kernel}.json").read_text())
        assert d["implements"]["bpf_user_rnd_u32"] == "bpf_get_prandom_u32"
        assert d["implements_status"] == ""
        # Nearly every helper has a proto kallsyms lists (tail_call's func is NULL).
        assert d["implements_total"] > 0.85 * d["helpers_total"]


def test_a_program_loaded_elsewhere_lists_only_the_calls_it_still_makes() -> None:
    import json

    from pytest_lbr.programs.helper_calls import ProgramCode, describe_calls

    d = json.loads((DATA / "helpers-6.12.json").read_text())
    entry = next(p for p in d["programs"] if p["name"] == "entry")
    code = ProgramCode("entry", 1, ("entry",), bytes.fromhex(entry["xlated"]), None)
    names = {int(a): n for a, n in d["symbols"].items()}
    prog = describe_calls(code, d["call_base"], names.get, {}, facts(d))
    assert not prog.written
    assert fates(prog) == [
        ("bpf_tail_call", "tail call", None, None),
        ("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32", None),
        ("bpf_ktime_get_ns", "call", "bpf_ktime_get_ns", None),
    ]
    assert not prog.inlined("bpf_loop")  # unknowable without the object's own calls


def test_a_trace_without_branches_says_why_in_one_line() -> None:
    """The LBR backend on software perf events records hits, never branches: a branch
    query on its trace fails with the reason, not a silent empty answer."""
    from pytest_lbr.assertions import explain_called, explain_has_path
    from pytest_lbr.capture.lbr.backend import NO_BRANCHES_NOTE
    from pytest_lbr.model import Hit, Trace

    why = NO_BRANCHES_NOTE.removeprefix("no branches: ")
    trace = Trace(["kfunc:vfs_write"], "lbr", [Hit("kfunc:vfs_write", retval=1)], no_branches=why)
    assert not trace.called("write_null")
    text = explain_called(trace, "write_null", by="vfs_write")
    assert text == (
        "trace.called('write_null', by='vfs_write') is False: this trace has no branches: " + why
    )
    assert "\n" not in explain_has_path(trace, "vfs_write", "write_null")


def test_without_the_implementations_nothing_is_called_inlined_or_rewritten() -> None:
    """Debian's arm64 6.1 lists no variables in kallsyms (no CONFIG_KALLSYMS_ALL):
    with no proto read and no debug vmlinux, a call must not be given another
    helper's name, nor be said inlined (a rewrite looks the same)."""
    import json

    from pytest_lbr.programs.helper_calls import ProgramCode, describe_calls

    d = json.loads((DATA / "helpers-6.1.json").read_text())
    names = {int(a): n for a, n in d["symbols"].items()}
    ids = {int(k): v for k, v in d["helper_ids"].items()}
    p = next(p for p in d["programs"] if p["name"] == "xdp_count")
    code = ProgramCode(
        "xdp_count",
        1,
        tuple(p["functions"]),
        bytes.fromhex(p["xlated"]),
        bytes.fromhex(p["written"]),
    )
    prog = describe_calls(code, d["call_base"], names.get, ids, facts(d, {}))
    assert {c.fate for c in prog.calls} == {"unknown"}, fates(prog)
    assert not prog.inlined("bpf_map_lookup_elem")


def _calls(*imms: int) -> bytes:
    """BPF instructions: one helper call (BPF_JMP | BPF_CALL, src 0) per `imm`, then exit."""
    import struct

    return b"".join(struct.pack("<BBhi", 0x85, 0, 0, imm) for imm in imms) + struct.pack(
        "<BBhi", 0x95, 0, 0, 0
    )


def test_removed_calls_are_told_from_inlined_ones_by_the_kernel_s_inlined_helpers() -> None:
    """libbpf-tools' way: code under a frozen `const volatile` is removed by the
    verifier; what is left of a helper it never inlines was removed, not inlined."""
    from pytest_lbr.programs.helper_calls import ProgramCode, describe_calls

    ids = {1: "bpf_map_lookup_elem", 6: "bpf_trace_printk", 16: "bpf_get_current_comm"}
    ids[118] = "bpf_jiffies64"
    base = 0xFFFFFFFF81000000
    names = {base + 0x5000: "__htab_map_lookup_elem"}
    written = _calls(16, 6, 1, 118)
    xlated = _calls(0x5000)  # the lookup rewritten; comm and printk gone; jiffies64 inlined
    protos = {"bpf_get_current_comm": "bpf_get_current_comm"}
    for release, fates_seen in (
        ("6.12.117+deb12-amd64", ["removed", "removed", "rewritten", "inlined"]),
        ("6.1.0-56-amd64", ["removed", "removed", "rewritten", "inlined"]),
        ("6.18.0", ["unknown", "unknown", "rewritten", "inlined"]),  # newer than the table
    ):
        known = Facts(protos, inlines=lambda h, r=release: verifier_inlines(h, r, "x86_64"))
        prog = describe_calls(
            ProgramCode("p", 1, ("p",), xlated, written), base, names.get, ids, known
        )
        assert [c.fate for c in prog.calls] == fates_seen, (release, prog.calls)
        assert not prog.inlined("bpf_get_current_comm")
        assert prog.removed("bpf_trace_printk") == (fates_seen[1] == "removed")
        assert prog.inlined("bpf_jiffies64")


def test_a_call_the_jit_inlines_keeps_the_helper_id_and_is_inlined() -> None:
    """arm64's JIT inlines bpf_get_smp_processor_id itself: the verifier leaves the
    call with the helper's id (8) as imm, not an offset from __bpf_call_base."""
    from pytest_lbr.programs.helper_calls import ProgramCode, describe_calls

    ids = {8: "bpf_get_smp_processor_id", 7: "bpf_get_prandom_u32"}
    base = 0xFFFF800080100000
    names = {base + 8: "bpf_opcode_in_insntable", base + 0x9000: "bpf_user_rnd_u32"}
    known = Facts({"bpf_user_rnd_u32": "bpf_get_prandom_u32"}, inlines=lambda h: False)
    code = ProgramCode("cpu_stamp", 1, ("cpu_stamp",), _calls(8, 0x9000), _calls(8, 7))
    prog = describe_calls(code, base, names.get, ids, known)
    assert fates(prog) == [
        ("bpf_get_smp_processor_id", "inlined", None, None),
        ("bpf_get_prandom_u32", "call", "bpf_user_rnd_u32", None),
    ]
    elsewhere = describe_calls(
        ProgramCode("cpu_stamp", 1, ("cpu_stamp",), _calls(8), None), base, names.get, ids, known
    )
    assert elsewhere.inlined("bpf_get_smp_processor_id")
