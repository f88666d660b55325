"""Helper names as the BPF C writes them, matched to what this kernel runs.

A program's source calls `bpf_get_prandom_u32()`; the kernel runs
`bpf_user_rnd_u32`. It calls `bpf_map_lookup_elem()` on a hash map; the
verifier rewrote that into a direct call of `__htab_map_lookup_elem`. It calls
`bpf_loop()`; the verifier inlined it into a loop calling the callback.

`align` compares a program's helper calls as written (the object's
instructions, from libbpf) with the calls left in its translated instructions
(from the kernel), in order, and says what became of each. `HelperNames` keeps
the kernel-wide facts (helper ids from BTF, implementations from the
`bpf_*_proto` tables, the map types' ops from their `bpf_map_ops`) and describes
each loaded program for the symbolizer. What one program's calls became is that
program's alone (`ProgramCalls.helper_of`): nothing learnt from one program names
another's calls, so an answer never depends on what a session loaded before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..bpf.libbpf import BpfError
from ..bytecode.instructions import (
    CALL,
    LD_IMM64,
    PSEUDO_FUNC,
    decode_insns,
    function_starts,
    helper_call_ids,
    xlated_calls,
)
from ..kernel.helpers import (
    helper_ids,
    helper_implementations,
    map_op_implementations,
    prog_array_members,
    verifier_inlines,
    xlated_insns,
)
from ..model import HelperCall, ProgramCalls
from .written import WrittenPrograms

__all__ = [
    "JIT_INLINED",
    "MAP_HELPERS",
    "TAIL_CALL",
    "Facts",
    "HelperNames",
    "ProgramCode",
    "describe_calls",
    "align",
    "callbacks",
    "tail_callers",
]

#: The name `align` is given for a tail call left in translated instructions.
TAIL_CALL = "(tail call)"
#: The name `align` is given for a call the verifier left for the JIT to inline
#: (`XlatedCall.helper_id`), with the helper's name after it.
JIT_INLINED = "(inlined by the JIT) "

#: Helpers whose calls the verifier turns into calls of the map type's own
#: functions (map->ops->map_lookup_elem ...) or inline code (ops->map_gen_lookup):
#: Linux kernel commit 09772d92cd5a ("bpf: avoid retpoline for
#: lookup/update/delete calls on maps") (in v5.0) for lookup, update and delete,
#: later extended to push/pop/peek, redirect_map, for_each_map_elem and
#: map_lookup_percpu_elem. A guest test checks the hash and array cases on 6.1
#: and 6.12.
MAP_HELPERS = frozenset(
    {
        "bpf_map_lookup_elem",
        "bpf_map_update_elem",
        "bpf_map_delete_elem",
        "bpf_map_push_elem",
        "bpf_map_pop_elem",
        "bpf_map_peek_elem",
        "bpf_redirect_map",
        "bpf_for_each_map_elem",
        "bpf_map_lookup_percpu_elem",
    }
)


def _fate(written: str, ran: str, known: Facts) -> str | None:
    """What a written call became if it is the translated call of `ran`, else None."""
    if written == "bpf_tail_call" or ran == TAIL_CALL:
        return "tail call" if written == "bpf_tail_call" and ran == TAIL_CALL else None
    if ran.startswith(JIT_INLINED):
        return "inlined" if ran.removeprefix(JIT_INLINED) == written else None
    if ran == written or known.protos.get(ran) == written:
        return "call"
    if written in MAP_HELPERS:
        if known.map_ops.get(ran) == written:
            return "rewritten"
        # Without the map types' ops: a map helper retargeted to a map's function,
        # only where the implementations are known (else a helper's own function
        # would look like one).
        if not known.map_ops and known.protos and ran not in known.protos:
            return "rewritten"
    return None


@dataclass(frozen=True)
class Facts:
    """The kernel-wide facts `align` reads: kernel function -> the helper it is."""

    #: Each helper's implementation (its bpf_*_proto's func) -> the helper.
    protos: Mapping[str, str]
    #: Each map type's ops (`htab_map_update_elem`) -> the helper rewritten into it.
    map_ops: Mapping[str, str] = field(default_factory=dict)
    #: Does this kernel's verifier inline the helper (None: cannot tell)?
    #: Default: the table in `kernel.helpers` for the running kernel.
    inlines: Callable[[str], bool | None] = lambda helper: verifier_inlines(
        helper, os.uname().release, os.uname().machine
    )


def align(
    written: Sequence[str],
    ran: Sequence[str],
    known: Facts,
    callbacks: Mapping[int, str] | None = None,
) -> tuple[HelperCall, ...]:
    """Match helper calls as written with the calls the kernel makes, in order.

    `written`: helper names of the object's call sites; `ran`: the kernel
    functions its translated calls enter (TAIL_CALL for a tail call, JIT_INLINED
    and the helper for a call the JIT inlines); `known`: the kernel-wide facts;
    `callbacks`: written call index -> the callback passed to it. The verifier
    removes calls (inlining, unreachable code) and retargets them (map rewrites) but
    keeps their order, so the longest in-order matching is the translation; a
    written call left unmatched was inlined or removed (`_with_gaps`).
    """
    n, m = len(written), len(ran)
    # best[i][j]: most matches of written[i:] with ran[j:]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            take = best[i + 1][j + 1] + 1 if _fate(written[i], ran[j], known) else 0
            best[i][j] = max(take, best[i + 1][j], best[i][j + 1])
    pairs: list[tuple[int, int, str]] = []  # (written index, ran index, fate)
    i = j = 0
    while i < n:
        fate = _fate(written[i], ran[j], known) if j < m else None
        if fate and best[i][j] == best[i + 1][j + 1] + 1:
            pairs.append((i, j, fate))
            i, j = i + 1, j + 1
        elif j < m and best[i][j] == best[i][j + 1]:
            j += 1
        else:
            i += 1
    return _with_gaps(written, ran, known, pairs, callbacks or {})


def _lost(helper: str, known: Facts) -> str:
    """What became of a written call with no translated call left for it.

    The verifier inlines some helpers (do_misc_fixups) and removes code it proved
    unreachable (opt_remove_dead_code, kernel/bpf/verifier.c: Linux kernel commit
    52875a04f4b2 ("bpf: verifier: remove dead code") (in v5.1)), such as a branch
    on a `const volatile` the loader froze. A helper this kernel never inlines was
    removed; one it inlines was inlined ("unknown" where the kernel's facts could
    not be read or the kernel is newer than the table of inlined helpers).
    """
    if not known.protos:
        return "unknown"  # a rewrite would look the same
    inlines = known.inlines(helper)
    if inlines is None:
        return "unknown"
    return "inlined" if inlines else "removed"


def _with_gaps(
    written: Sequence[str],
    ran: Sequence[str],
    known: Facts,
    pairs: list[tuple[int, int, str]],
    callbacks: Mapping[int, str],
) -> tuple[HelperCall, ...]:
    """Every written call's fate, from the matched `pairs` and the gaps between them.

    Between two matched calls, the written calls left unmatched and the
    translated calls left unmatched are the same sites in the same order, as far
    as both go: the verifier keeps the order of what it does not remove. So they
    pair up as calls of kernel functions not known to implement their helper
    (bpf_probe_read_str runs bpf_probe_read_compat_str, whose proto has another
    name). A call is lost (`_lost`) only where its gap has no translated call
    left: the translated instructions hold fewer calls there than the source wrote.
    """
    out: list[HelperCall] = []
    bounds = [*pairs, (len(written), len(ran), "")]
    wi = rj = 0
    for pi, pj, fate in bounds:
        gap_ran = [k for k in range(rj, pj) if ran[k] != TAIL_CALL]
        for k in range(wi, pi):
            if gap_ran and known.protos and written[k] != "bpf_tail_call":
                out.append(HelperCall(written[k], "call", ran[gap_ran.pop(0)], callbacks.get(k)))
            else:
                out.append(HelperCall(written[k], _lost(written[k], known), None, callbacks.get(k)))
        if pi < len(written):
            func = None if fate in ("tail call", "inlined") else ran[pj]
            out.append(HelperCall(written[pi], fate, func, callbacks.get(pi)))
        wi, rj = pi + 1, pj + 1
    return tuple(out)


def callbacks(insns: bytes) -> tuple[list[int], dict[int, int]]:
    """(start of each function, helper call index -> the function index of the
    callback passed to it) from an object's instructions.

    Functions are the main one (at 0) and every target of a subprogram call or
    of a function address load (`ld_imm64` with BPFPSEUDO_FUNC), in address
    order: the order the kernel's func_info lists them. A callback is the
    function whose address was loaded last before the helper call, in the same
    function.
    """
    decoded = decode_insns(insns)
    ordered = function_starts(insns)
    starts = set(ordered)
    out: dict[int, int] = {}
    pending: list[int] = []  # function addresses loaded and not yet passed to a call
    call = 0
    for k, insn in enumerate(decoded):
        if k in starts:
            pending = []  # a new function: loads in the previous one are not ours
        if insn.code == LD_IMM64 and insn.src == PSEUDO_FUNC:
            pending.append(k + insn.imm + 1)
        elif insn.code == CALL and insn.src == 0:
            if pending:
                out[call] = ordered.index(pending.pop())
                pending = []
            call += 1
    return ordered, out


class HelperNames:
    """Kernel-wide helper facts, read once, and per-program call descriptions.

    `locate` names a kernel address (the symbolizer's kallsyms); `call_base`
    is the address of `__bpf_call_base`; `data_address` gives a data symbol's
    live address where kallsyms lists none (the debug vmlinux); `listed` the
    `*_proto` and `*_map_ops` data symbols of the caller's kallsyms read (None: none).
    """

    def __init__(
        self,
        locate: Callable[[int], str | None],
        call_base: int | None,
        data_address: Callable[[str], int | None] | None = None,
        listed: Iterable[tuple[str, int]] | None = None,
    ) -> None:
        self._locate = locate
        self._call_base = call_base
        self.ids = helper_ids()
        self.status = ""
        #: kernel function -> helper it implements (its bpf_*_proto's func): true of
        #: every caller, so the symbolizer names these functions for any call.
        self.protos: dict[str, str] = {}
        #: a map type's op -> the helper a program's call of it was written as
        #: (true only of calls from BPF programs: `ProgramCalls.helper_of`).
        self.map_ops: dict[str, str] = {}
        if os.geteuid() == 0:
            listed = list(listed) if listed is not None else None
            self.protos, self.status = helper_implementations(
                self.ids.values(), locate, data_address, listed
            )
            if self.protos and listed:
                self.map_ops = map_op_implementations(locate, listed)
        else:
            self.status = "not root: helper implementations unknown"
        self._facts = Facts(self.protos, self.map_ops)

    def describe(
        self,
        fd: int,
        prog_id: int,
        names: tuple[str, str],
        functions: Sequence[str],
        written: WrittenPrograms | None = None,
    ) -> ProgramCalls:
        """The helper calls of program `prog_id` (`names`: its name as the C wrote
        it and the kernel's 15-byte one; `functions` in the kernel's func_info
        order) behind `fd`, as written (where the book `written` has its
        instructions) and as translated."""
        try:
            raw = xlated_insns(fd)
        except BpfError:
            raw = b""
        insns = written.insns(prog_id) if written is not None else None
        code = ProgramCode(names[0], prog_id, tuple(functions), raw, insns)
        calls = describe_calls(code, self._call_base, self._locate, self.ids, self._facts)
        return replace(calls, kernel_name=names[1])


@dataclass(frozen=True)
class ProgramCode:
    """A loaded program's instructions: translated (the kernel's) and as written."""

    name: str
    prog_id: int
    #: Its functions, main first, in the kernel's func_info order.
    functions: tuple[str, ...]
    xlated: bytes
    #: The object's instructions as libbpf loaded them; None if loaded elsewhere.
    written: bytes | None


def describe_calls(
    code: ProgramCode,
    call_base: int | None,
    locate: Callable[[int], str | None],
    ids: Mapping[int, str],
    known: Facts,
) -> ProgramCalls:
    """What became of each helper call of `code` (pure: no kernel access).

    `call_base`: the address of `__bpf_call_base` (None: calls unknown);
    `locate`: kernel address -> function name; `ids`: helper id -> name;
    `known`: the kernel-wide facts.
    """
    ran: list[str] = []
    if call_base is not None:
        for call in xlated_calls(code.xlated, call_base):
            if call.helper_id is not None and call.helper_id in ids:
                # A helper's id, not an offset: no function a program calls lies within
                # a page after __bpf_call_base (the interpreter's own code follows it in
                # kernel/bpf/core.c), though a function may (arm64 aligns them closely).
                found: str | None = JIT_INLINED + ids[call.helper_id]
            else:
                found = TAIL_CALL if call.tail_call else locate(call.addr)
            ran.append(found if found is not None else f"{call.addr:#x}")
    if code.written is None:
        # Loaded elsewhere: only the calls the kernel still makes are known, named
        # by the kernel-wide facts (a function no fact names stands for itself).
        return ProgramCalls(
            code.name,
            code.prog_id,
            code.functions,
            tuple(_as_run(r, known) for r in ran),
            written=False,
        )
    written = helper_call_ids(code.written)
    # BPF_FUNC_tail_call is in the enum too: "bpf_tail_call".
    names = [ids.get(h, f"helper#{h}") for h in written]
    _, cbs = callbacks(code.written)
    cb_names = {k: code.functions[f] for k, f in cbs.items() if f < len(code.functions)}
    calls = align(names, ran, known, cb_names)
    return ProgramCalls(code.name, code.prog_id, code.functions, calls)


def _as_run(ran: str, known: Facts) -> HelperCall:
    """A translated call of a program loaded elsewhere, named by the kernel's facts."""
    if ran == TAIL_CALL:
        return HelperCall("bpf_tail_call", "tail call")
    if ran.startswith(JIT_INLINED):
        return HelperCall(ran.removeprefix(JIT_INLINED), "inlined")
    if ran in known.map_ops:
        return HelperCall(known.map_ops[ran], "rewritten", ran)
    return HelperCall(known.protos.get(ran, ran), "call", ran)


def tail_callers(arrays: Mapping[int, Sequence[str]]) -> dict[int, tuple[str, ...]]:
    """prog id -> names of the programs whose program arrays hold it.

    `arrays`: program-array map id -> names of the programs that use it (the
    verifier lets a program use a program array only for its tail calls). Read
    anew each time: a program array changes while its programs stay.
    """
    out: dict[int, list[str]] = {}
    for map_id, users in arrays.items():
        try:
            members = prog_array_members(map_id)
        except BpfError:
            continue  # gone, or not ours to open
        for member in members:
            names = out.setdefault(member, [])
            for user in users:
                if user not in names:
                    names.append(user)
    return {k: tuple(v) for k, v in out.items()}
