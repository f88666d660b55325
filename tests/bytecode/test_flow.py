"""Calls proven by a program's control flow (`bytecode.flow`, `capture.implied`),
on the translated instructions the 6.12 guest gave for the examples' programs
(tests/data/helpers-6.12.json)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_lbr.bytecode.flow import (
    call_dominators,
    jit_call_index,
    main_calls,
    main_flows_worked_out,
)
from pytest_lbr.bytecode.instructions import decode_insns
from pytest_lbr.capture.implied import ProgramFlow, add_implied
from pytest_lbr.model import Branch, Hit, Location, Trace

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "helpers-6.12.json").read_text())
CALL_BASE: int = DATA["call_base"]
XLATED = {p["name"]: bytes.fromhex(p["xlated"]) for p in DATA["programs"]}


def _targets(name: str) -> list[int]:
    """What the JIT calls for the main function's calls: helpers at call_base + imm,
    tail calls jump (no call instruction), subprograms somewhere of their own."""
    insns = decode_insns(XLATED[name])
    out = []
    for k in main_calls(XLATED[name]):
        if insns[k].src == 0 and insns[k].imm == 12:
            continue
        out.append(CALL_BASE + insns[k].imm if insns[k].src == 0 else 0xFFFF_0000 + k)
    return out


def test_a_call_on_every_path_dominates_and_a_branch_does_not() -> None:
    # xdp_count: lookup (21); found -> update (35) ... ; rnd (36) on the other arm.
    assert call_dominators(XLATED["xdp_count"]) == {
        21: frozenset(),
        35: frozenset({21}),
        36: frozenset({21}),
    }
    assert call_dominators(XLATED["cpu_stamp"]) == {10: frozenset(), 23: frozenset({10})}


def test_subprograms_and_callbacks_are_not_followed() -> None:
    # entry: two bpf_loop-style subprogram calls (21, 29), a tail call (34); the
    # calls at 38 and 46 are in its callbacks.
    assert main_calls(XLATED["entry"]) == [21, 29, 34]
    assert set(call_dominators(XLATED["entry"])) == {21, 29, 34}


def test_jit_calls_pair_with_translated_calls_or_nothing_is_implied() -> None:
    assert jit_call_index(XLATED["xdp_count"], CALL_BASE, _targets("xdp_count")) == [21, 35, 36]
    # The tail call is a jump in the JIT image: the two subprogram calls pair.
    assert jit_call_index(XLATED["entry"], CALL_BASE, _targets("entry")) == [21, 29]
    wrong = _targets("xdp_count")
    wrong[1] += 16  # a call the translated instructions do not make
    assert jit_call_index(XLATED["xdp_count"], CALL_BASE, wrong) is None
    assert jit_call_index(XLATED["xdp_count"], CALL_BASE, wrong[:2]) is None


def test_an_unrecordable_call_is_implied_before_the_call_it_dominates() -> None:
    lookup, update = (
        Location(0x2000, "__htab_map_lookup_elem"),
        Location(0x3000, "htab_map_update_elem"),
    )
    # Say the lookup's implementation were unrecordable: the recorded update proves it.
    flow = ProgramFlow(
        sites={0x1010: 21, 0x1050: 35, 0x1060: 36},
        dominators=call_dominators(XLATED["xdp_count"]),
        unrecordable={21: (0x1010, 0x2000, "__htab_map_lookup_elem")},
    )
    hit = Hit("prog:name:xdp_count")
    site = Location(0x1050, "xdp_count", 0x50)
    hit.branches = [Branch(site, update, "call"), Branch(update, site, "ret")]
    add_implied(hit, flow)
    assert [b.kind for b in hit.branches] == ["implied", "call", "ret"]
    assert hit.branches[0].dst == lookup
    trace = Trace(hits=[hit])
    assert trace.called("__htab_map_lookup_elem")
    assert "(implied: its call site dominates a recorded call)" in trace.edges()
    assert "(implied: proven by the code, not recorded)" in str(trace)
    # A run that recorded only the other arm's call (36) proves the lookup too, and
    # a run that recorded nothing proves nothing.
    empty = Hit("prog:name:xdp_count")
    add_implied(empty, flow)
    assert empty.branches == []


def test_runs_with_no_branch_say_why() -> None:
    from pytest_lbr.capture.implied import empty_runs_note

    spec = "prog:name:dump_task"
    full = Hit(spec, branches=[Branch(Location(1), Location(2), "call")])
    hits = [full, Hit(spec), Hit(spec), Hit("prog:name:other")]
    assert empty_runs_note(hits, [spec, "prog:name:other"]) == [
        f"{spec}: 2 of 3 runs hold no branch: the function tracer recorded no call in "
        "them (each is known from its fexit return), and none of their calls is implied "
        "by a recorded one",
        "prog:name:other: 1 of 1 runs hold no branch: the function tracer recorded no "
        "call in them (each is known from its fexit return), and none of their calls is "
        "implied by a recorded one",
    ]
    assert empty_runs_note([full], [spec]) == []


def test_return_values_read_as_the_programs_c_type() -> None:
    from pytest_lbr.capture.implied import typed_returns
    from pytest_lbr.model import Hit

    returns = {
        "prog:name:deny": (4, True),  # int: -EACCES
        "prog:name:init": (0, False),  # void
        "prog:name:count": (4, False),  # u32
        "prog:name:other": None,
    }
    hits = [
        Hit("prog:name:deny", retval=4294967283),
        Hit("prog:name:deny", retval=0),
        Hit("prog:name:init", retval=24),
        Hit("prog:name:count", retval=4294967283),
        Hit("prog:name:other", retval=4294967283),
    ]
    notes = typed_returns(hits, returns)
    assert [h.retval for h in hits] == [-13, 0, None, 4294967283, 4294967283]
    assert notes == ["prog:name:init returns void: its runs have no return value"]


def _instruction_dominators(xlated: bytes) -> dict[int, frozenset[int]]:
    """The reference: call -> calls on every path to it, by dominators over single
    instructions (no blocks), following the main function from instruction 0."""
    from pytest_lbr.bytecode.instructions import is_call, successors

    insns = decode_insns(xlated)
    reach, todo = set(), [0]
    while todo:
        i = todo.pop()
        if i not in reach and 0 <= i < len(insns):
            reach.add(i)
            todo.extend(successors(insns[i], i))
    preds: dict[int, set[int]] = {i: set() for i in reach}
    for i in reach:
        for j in successors(insns[i], i):
            if j in reach:
                preds[j].add(i)
    dom = {i: set(reach) for i in reach}
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for i in sorted(reach - {0}):
            new = set.intersection(*(dom[p] for p in preds[i])) | {i} if preds[i] else {i}
            if new != dom[i]:
                dom[i], changed = new, True
    calls = [i for i in sorted(reach) if is_call(insns[i])]
    return {c: frozenset(d for d in calls if d != c and d in dom[c]) for c in calls}


def test_block_dominators_agree_with_instruction_dominators_on_real_programs() -> None:
    """One engine for coverage and implied calls: its block rule (a tail call ends a
    block) gives the calls that ran before each call exactly as dominators over
    single instructions do, on every program the 6.1 and 6.12 guests translated."""
    for kernel in ("6.1", "6.12"):
        data = json.loads(
            (Path(__file__).resolve().parents[1] / "data" / f"helpers-{kernel}.json").read_text()
        )
        for p in data["programs"]:
            xlated = bytes.fromhex(p["xlated"])
            assert call_dominators(xlated) == _instruction_dominators(xlated), (kernel, p["name"])


def test_a_tail_call_ends_its_block() -> None:
    from pytest_lbr.bytecode.flow import control_flow
    from pytest_lbr.bytecode.instructions import is_tail_call

    flow = control_flow(XLATED["entry"])
    (tail,) = [k for k in main_calls(XLATED["entry"]) if is_tail_call(flow.insns[k])]
    after = flow.block_of[tail + 1]
    assert after >= 0 and after != flow.block_of[tail]
    assert flow.blocks[flow.block_of[tail]].end == tail + 1
    assert flow.ran_before(tail + 1, tail)  # the instruction after it runs only after it


def test_a_program_loaded_again_has_the_flow_already_worked_out() -> None:
    """Two loads of one program differ in their maps' ids (the 64-bit loads of a
    translation): its flow is kept without them, and worked out once."""
    from pytest_lbr.bpf import BpfObject
    from pytest_lbr.bytecode.flow import without_constants
    from pytest_lbr.kernel.helpers import xlated_insns
    from tests.bpf.objects import bpf_object, require_root

    require_root()
    with BpfObject(bpf_object("xdp_helpers")) as a, BpfObject(bpf_object("xdp_helpers")) as b:
        first = xlated_insns(a.programs["xdp_helpers"].fd)
        again = xlated_insns(b.programs["xdp_helpers"].fd)
    assert first != again  # other map ids
    assert without_constants(first) == without_constants(again)
    assert len(without_constants(first)) == len(first)
    main_calls(first)
    worked_out = main_flows_worked_out()
    assert main_calls(again) == main_calls(first)
    assert call_dominators(again) == call_dominators(first)
    assert main_flows_worked_out() == worked_out
    # Nothing but the loads' values differs: every other byte is kept.
    changed = [i for i in range(len(first)) if without_constants(first)[i] != first[i]]
    assert changed and all(
        first[i - i % 8] == 0x18 or first[i - i % 8 - 8] == 0x18 for i in changed
    )
