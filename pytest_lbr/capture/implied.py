"""Calls of a BPF program that the function tracer cannot record, proven by its code.

A helper like `bpf_get_current_task` leaves no function-tracer record (notrace:
kernel/trace/ is built without -pg, and it calls nothing that is traced), and a
kprobe event on it cannot be defined (the write to kprobe_events fails in the 6.12
guest, as for every function missing from available_filter_functions;
trace_kprobe.c refuses notrace functions without CONFIG_KPROBE_EVENTS_ON_NOTRACE).
Where its call site dominates a recorded call of the same run
(`pytest_lbr.bytecode.flow.call_dominators`), it ran: the graph backend adds it to the hit as an "implied"
branch (`pytest_lbr.model.BRANCH_KINDS`), which `called()` counts and the text
marks. Only calls of functions the tracer cannot patch are implied: any other
call would have been recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_lbr.bytecode.flow import without_constants
from pytest_lbr.capture.call_sites import call_sites
from pytest_lbr.model import Branch, Hit, Location

if TYPE_CHECKING:
    from pytest_lbr.programs.info import ProgramDetails
    from pytest_lbr.symbols.kallsyms import KernelSymbols

__all__ = [
    "ProgramFlow",
    "add_implied",
    "empty_runs_note",
    "finish_runs",
    "flow_of",
    "flows_worked_out",
    "program_flow",
    "program_returns",
    "read_details",
    "shapes_worked_out",
    "typed_returns",
]


@dataclass(frozen=True)
class ProgramFlow:
    """A loaded program's main-function calls, as its JIT image and translated
    instructions give them."""

    #: JIT return address of each call instruction -> its translated call index.
    sites: dict[int, int]
    #: Translated call index -> the calls that ran before it on every path.
    dominators: dict[int, frozenset[int]]
    #: Translated call index -> (JIT return address, target address, target name),
    #: for the calls of functions the function tracer cannot patch.
    unrecordable: dict[int, tuple[int, int, str]]
    #: What its main function returns (`Btf.return_type`): (0, False) void (a
    #: struct_ops callback such as a congestion control's `init`: what its fexit
    #: reads is a stale register); (4, True) an `int`, whose -EACCES the fexit reads
    #: as 4294967283; None unknown.
    returns: tuple[int, bool] | None = None


def program_flow(
    fd: int,
    traceable: Callable[[str], bool],
    syms: KernelSymbols,
    details: ProgramDetails | None = None,
    shapes: int | None = None,
) -> ProgramFlow | None:
    """The flow of the program behind `fd`, or None where its calls cannot be tied
    to its JIT image (`jit_call_index`) or its code cannot be read (not root).
    `traceable`: whether the function tracer can patch a function (by name);
    `syms`: kallsyms, for the called functions' names; `details`: the program's
    `program_details`, where the caller has them. With `shapes` (what `traceable`
    stands for: the same number, the same answers), a program loaded again is paired
    and named as the first program of its shape was (`bytecode.flow.without_constants`)."""
    from pytest_lbr.bpf.libbpf import BpfError
    from pytest_lbr.kernel.helpers import xlated_insns
    from pytest_lbr.kernel.machine import machine
    from pytest_lbr.programs.info import program_details
    from pytest_lbr.programs.lines import jited_image
    from pytest_lbr.symbols.disasm import call_targets, disassemble

    try:
        xlated = xlated_insns(fd)
        details = details or program_details(fd)
        functions = details.functions
        start, image = jited_image(fd)
    except (BpfError, OSError):
        return None
    returns = _returns_of(details)
    call_base = syms.address_of("__bpf_call_base")
    if not functions or not xlated or call_base is None:
        return None
    arch = machine().name
    insns = disassemble(image[: functions[0][1]], start, arch, jit=True)
    size_at = {i.addr: i.size for i in insns}
    calls = [(at + size_at[at], target) for at, target in call_targets(insns, arch)]
    # What pairing and naming the calls read (the calls' places in the image, the
    # core kernel's functions they call): the same, the same answer.
    shape = None
    if shapes is not None:
        where = tuple((ret - start, t if syms.in_core(t) else None) for ret, t in calls)
        shape = (shapes, without_constants(xlated), where)
    if shape is not None and shape in _shaped:
        _shaped[shape] = _shaped.pop(shape)  # the newest last: the oldest goes first
        first, known = _shaped[shape]
        return None if known is None else _moved(known, start - first, returns)
    flow = _paired(traceable, syms, xlated, calls, call_base, returns)
    if shape is not None:
        _shaped[shape] = (start, flow)
        if len(_shaped) > _MAX_FLOWS:
            del _shaped[next(iter(_shaped))]
    return flow


def _paired(
    traceable: Callable[[str], bool],
    syms: KernelSymbols,
    xlated: bytes,
    calls: list[tuple[int, int]],
    call_base: int,
    returns: tuple[int, bool] | None,
) -> ProgramFlow | None:
    """`program_flow` from the main function's JIT `calls` (return address, target)."""
    from pytest_lbr.bytecode.flow import call_dominators, jit_call_index

    index = jit_call_index(xlated, call_base, [t for _, t in calls])
    if index is None:
        return None
    unrecordable: dict[int, tuple[int, int, str]] = {}
    for k, (ret, target) in zip(index, calls, strict=True):
        sym = syms.lookup(target)
        if sym is not None and sym.offset == 0 and sym.module is None and not traceable(sym.name):
            unrecordable[k] = (ret, target, sym.name)
    sites = {ret: k for k, (ret, _) in zip(index, calls, strict=True)}
    return ProgramFlow(sites, call_dominators(xlated), unrecordable, returns)


def _moved(flow: ProgramFlow, delta: int, returns: tuple[int, bool] | None) -> ProgramFlow:
    """`flow` of a program of the same shape whose main function is `delta` bytes
    away (its calls at the same offsets), with its own `returns`."""
    return ProgramFlow(
        {ret + delta: k for ret, k in flow.sites.items()},
        flow.dominators,
        {k: (ret + delta, target, name) for k, (ret, target, name) in flow.unrecordable.items()},
        returns,
    )


def add_implied(hit: Hit, flow: ProgramFlow) -> None:
    """Add to `hit` (one run of the program) the calls of unrecordable functions
    whose call sites dominate one of its recorded calls, each just before the
    first recorded call it dominates."""
    recorded: list[tuple[int, int]] = []  # (branch position, translated call index)
    for pos, b in enumerate(hit.branches):
        k = flow.sites.get(b.src.addr) if b.kind == "call" else None
        if k is not None:
            recorded.append((pos, k))
    seen = {k for _, k in recorded}
    before: dict[int, list[int]] = {}  # branch position -> implied calls to insert there
    placed: set[int] = set()
    for pos, k in recorded:
        for d in sorted(flow.dominators.get(k, ())):
            if d in flow.unrecordable and d not in seen and d not in placed:
                before.setdefault(pos, []).append(d)
                placed.add(d)
    if not before:
        return
    out: list[Branch] = []
    for pos, b in enumerate(hit.branches):
        for d in before.get(pos, ()):
            ret, target, name = flow.unrecordable[d]
            out.append(Branch(Location(ret), Location(target, name, 0), "implied"))
        out.append(b)
    hit.branches = out


def flow_of(
    fd: int,
    available: str,
    program: tuple[int, str] | None = None,
    details: ProgramDetails | None = None,
) -> ProgramFlow | None:
    """The program's calls' flow, None where unknown. `program`: its (id, tag), under
    which the flow is kept and reused by every later trace of it (a program's
    code never changes while it is loaded; an id is not reused while it is); a
    program loaded again takes its shape's (`program_flow`). `details`: its
    `program_details`, where the caller has them."""
    syms = call_sites.kallsyms()
    if syms is None:
        return None
    key = None if program is None else (*program, hash(available))
    if key is not None and key in _flows:
        _flows[key] = _flows.pop(key)  # the newest last: the oldest goes first
        return _flows[key]
    names = _traceable(available)
    flow = program_flow(fd, names.__contains__, syms, details, hash(available))
    if key is not None:
        _flows[key] = flow
        if len(_flows) > _MAX_FLOWS:
            del _flows[next(iter(_flows))]
    return flow


#: Flows by (program id, tag, the traceable functions' text's hash): see `flow_of`.
_flows: dict[tuple[int, str, int], ProgramFlow | None] = {}
#: Flows by shape (`program_flow`) -> (the main function's address, its flow), of
#: the first program of that shape.
_shaped: dict[tuple[object, ...], tuple[int, ProgramFlow | None]] = {}
#: Programs' flows kept: a long session loads many.
_MAX_FLOWS = 1024


def flows_worked_out() -> int:
    """How many programs' flows this process has worked out and keeps (for tests:
    a program traced again is not read again)."""
    return len(_flows)


def shapes_worked_out() -> int:
    """How many program shapes' flows this process has worked out and keeps (for
    tests: a program loaded again is not paired and named again)."""
    return len(_shaped)


@functools.lru_cache(maxsize=2)
def _traceable(available: str) -> frozenset[str]:
    """The core kernel's function names in `available_filter_functions` text."""
    return frozenset(line for line in available.splitlines() if line and " " not in line)


def empty_runs_note(hits: list[Hit], programs: list[str]) -> list[str]:
    """Why some runs of program targets `programs` hold no branch: one note per
    program with such runs (an empty hit says why it is empty)."""
    notes = []
    for spec in programs:
        runs = [h for h in hits if h.target == spec]
        empty = sum(1 for h in runs if not h.branches)
        if empty:
            notes.append(
                f"{spec}: {empty} of {len(runs)} runs hold no branch: the function tracer "
                "recorded no call in them (each is known from its fexit return), and none "
                "of their calls is implied by a recorded one"
            )
    return notes


def read_details(fd: int) -> ProgramDetails | None:
    """`program_details` of the program behind `fd`, None where unreadable."""
    from pytest_lbr.bpf.libbpf import BpfError
    from pytest_lbr.programs.info import program_details

    try:
        return program_details(fd)
    except BpfError:
        return None


def program_returns(fd: int) -> tuple[int, bool] | None:
    """What the program (an fd) returns, from its BTF (`Btf.return_type`): (size,
    signed) for an integer, (0, False) for void; None where unknown."""
    from pytest_lbr.bpf.libbpf import BpfError
    from pytest_lbr.programs.info import program_details

    try:
        return _returns_of(program_details(fd))
    except (BpfError, OSError):
        return None


def _returns_of(details: ProgramDetails) -> tuple[int, bool] | None:
    """What the main function of a program with these details returns (its BTF)."""
    from pytest_lbr.programs.info import Btf

    if not details.func_types:
        return None
    with Btf(details.btf_id) as btf:
        return btf.return_type(details.func_types[0])


def typed_returns(hits: list[Hit], returns: dict[str, tuple[int, bool] | None]) -> list[str]:
    """Read return values as the program's C type gives them (`returns`: program
    target -> `program_returns`): none for a program that returns void (one note per
    such program traced: the register its exit hook read was stale), a signed integer
    sign-extended (an fmod_ret's -EACCES, not 4294967283)."""
    notes = []
    for spec, typed in returns.items():
        if typed is None:
            continue
        size, signed = typed
        runs = [h for h in hits if h.target == spec]
        for h in runs:
            if size == 0:
                h.retval = None
            elif h.retval is not None and signed and size < 8:
                bits = size * 8
                v = h.retval & ((1 << bits) - 1)
                h.retval = v - (1 << bits) if v >> (bits - 1) else v
        if runs and size == 0:
            notes.append(f"{spec} returns void: its runs have no return value")
    return notes


def finish_runs(hits: list[Hit], flows: dict[str, ProgramFlow | None]) -> list[str]:
    """What the programs' code adds to their runs' hits (`flows`: program target ->
    its flow): implied calls, return values as their C type reads, and the notes."""
    for hit in hits:
        flow = flows.get(hit.target)
        if flow is not None:
            add_implied(hit, flow)
    returns = {spec: flow.returns if flow is not None else None for spec, flow in flows.items()}
    return empty_runs_note(hits, list(flows)) + typed_returns(hits, returns)
