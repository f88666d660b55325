"""Every reason a failed `called()` gives is true of the program's translated
instructions.

For each program of the conformance objects, loaded in this kernel, every helper
its C source calls is asked with `called(helper, by=program)` of a trace that went
through the program and recorded no call, so every answer is False and every
reason is stated. A reason that says the verifier inlined a call must be seen in
the translated instructions: they hold fewer helper calls than the object's.
(Before, `bpf_probe_read_str`, which runs `bpf_probe_read_compat_str`, was said to
be inlined in handle_exec while every call was still there.)
"""

from __future__ import annotations

import pytest

from pytest_lbr.assertions import explain_called
from pytest_lbr.bytecode.instructions import decode_insns
from pytest_lbr.kernel.helpers import xlated_insns
from pytest_lbr.macros import MACRO_HELPERS
from pytest_lbr.model import Branch, Hit, Trace
from pytest_lbr.programs.info import program_details
from pytest_lbr.symbols import get_symbolizer

OBJECTS = ("exec_tp", "unlink_fentry", "ksyscall", "iter_task")
_TAIL_CALL = 12


def helper_calls(raw: bytes) -> int:
    """Helper calls (not tail calls) among BPF instructions `raw`."""
    return sum(1 for i in decode_insns(raw) if i.is_helper_call and i.imm != _TAIL_CALL)


@pytest.mark.parametrize("name", OBJECTS)
def test_every_stated_reason_holds_in_the_translated_instructions(bpf, built, name):
    obj = bpf.load(built(name))
    checked = 0
    for prog in obj.programs.values():
        main = program_details(prog.fd).functions[0][0]
        where = get_symbolizer().locate(main, written=bpf.written)
        calls = where.program
        assert calls is not None, f"{prog.name}: not described ({where})"
        written = bpf.written.insns(prog.id)
        assert written is not None
        vanished = helper_calls(written) - helper_calls(xlated_insns(prog.fd))
        # Inlined and removed (unreachable) calls both leave no call behind.
        said_lost = [c.helper for c in calls.calls if c.fate in ("inlined", "removed", "unknown")]
        assert len(said_lost) <= vanished, (prog.name, said_lost, vanished, calls.calls)
        # A trace through the program that recorded no call: every query is False.
        hit = Hit(f"prog:name:{prog.name}", branches=[Branch(where, where, "jmp")])
        trace = Trace(hits=[hit])
        asked = {c.helper for c in calls.calls}
        asked |= {m for m, hs in MACRO_HELPERS.items() if asked & set(hs)}
        for helper in sorted(asked):
            assert not trace.called(helper, by=prog.name)
            reason = explain_called(trace, helper, by=prog.name)
            if "inlined by" in reason or "removed by" in reason:
                assert vanished > 0, reason
            if "was called, but by" not in reason:
                assert "no call into" in reason or "inlined by" in reason, reason
            checked += 1
    assert checked, f"{name}: no helper call asked"
