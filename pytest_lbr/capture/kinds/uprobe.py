"""User functions (``uprobe:PATH:SYMBOL``, ``uretprobe:PATH:SYMBOL``): hooked, armed and cut.

The LBR tracer attaches its uprobe (or uretprobe) program at the function, in any
process running the binary. The graph backend adds a uprobe event carrying the
return address (a uretprobe event, the return value); a hit is one event record,
with the thread's kernel calls since its previous hit and the user-level edge:
the call into the function (caller -> function, the caller read from the return
address) or the return from it.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, ClassVar

from pytest_lbr.bpf.libbpf import UprobeOpts, lib
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.branches import append_step, event_retval
from pytest_lbr.capture.graph.calls import Step
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.hooks.state import Attached
from pytest_lbr.capture.kinds.protocol import GraphArming, HitCutting, Hooking, TargetKind
from pytest_lbr.kernel.machine import machine
from pytest_lbr.kernel.tracefs import TracefsError
from pytest_lbr.model import Branch, Hit, Location
from pytest_lbr.targets import Target

if TYPE_CHECKING:  # pyelftools: imported only where a uprobe target's binary is read
    from pytest_lbr.symbols.elf import ElfFunctions

__all__ = ["UPROBE", "UserProbe"]


class UserProbe(TargetKind):
    """``uprobe:PATH:SYMBOL`` (its entries) and ``uretprobe:PATH:SYMBOL`` (its returns)."""

    names: ClassVar[tuple[str, ...]] = ("uprobe", "uretprobe")
    by_events: ClassVar[bool] = True

    def shared_programs(
        self, target: Target, *, ret: bool, fallback: str
    ) -> list[tuple[bool, str]]:
        return [(True, _program(target))]

    def attach(self, hooks: Hooking, index: int, target: Target) -> Attached:
        assert target.binary is not None and target.function is not None
        if not os.path.exists(target.binary):
            raise CaptureError(f"{target.spec}: no such file {target.binary}")
        uopts = UprobeOpts(
            sz=ctypes.sizeof(UprobeOpts),
            bpf_cookie=index << 32,
            retprobe=_returns(target),
            func_name=target.function.encode(),
        )
        link = lib.bpf_program__attach_uprobe_opts(
            hooks.shared_program(True, _program(target)),
            -1,
            target.binary.encode(),
            0,
            ctypes.byref(uopts),
        )
        hooks.keep_link(link, f"attach to {target.spec}")
        return Attached(target, [target.function], target.kind)

    def arm_graph(self, arming: GraphArming, index: int, target: Target) -> None:
        arming.matchers.append(lambda name, addr: False)  # events, not frames
        arming.events[index] = _add_user_probe(arming, index, target)

    def graph_hits(self, cut: HitCutting, index: int, target: Target) -> list[Hit]:
        assert cut.user is not None
        return _user_hits(target, cut.events[index], cut.user[index], cut.tid, cut.steps)

    def hit_event(self, event: str, record: FunctionRecord | EventRecord) -> bool:
        return isinstance(record, EventRecord) and record.name == event


UPROBE = UserProbe()


def _returns(target: Target) -> bool:
    """A uretprobe (the function's returns), not a uprobe (its entries)."""
    return target.kind == "uretprobe"


def _program(target: Target) -> str:
    """The tracer's program that hooks it."""
    return "lbr_uretprobe" if _returns(target) else "lbr_uprobe"


def _add_user_probe(arming: GraphArming, index: int, t: Target) -> str:
    """A uprobe (entry, with the return address) or uretprobe event on `t`."""
    assert t.binary is not None and t.function is not None
    if not os.path.exists(t.binary):
        raise CaptureError(f"{t.spec}: no such file {t.binary}")
    path = os.path.realpath(t.binary)
    if any(c.isspace() for c in path):
        raise CaptureError(f"{t.spec}: uprobe_events cannot take a path with spaces")
    from pytest_lbr.symbols.elf import ElfError, ElfFunctions  # pyelftools: uprobes only

    try:
        elf = ElfFunctions(path)
        offset = elf.file_offset(t.function)
    except ElfError as exc:
        raise CaptureError(f"{t.spec}: {exc}") from None
    arming.user[index] = elf
    if not _returns(t):
        definition = f"p {path}:{offset:#x} caller={_return_address()}:x64"
    else:
        fetch = elf.return_type(t.function) or "x64"
        definition = f"r {path}:{offset:#x} ret=$retval:{fetch}"
    try:
        return arming.inst.add_probe("uprobe", definition).split("/")[1]
    except TracefsError as exc:
        raise CaptureError(f"{t.spec}: {exc}") from None


def _return_address() -> str:
    """A uprobe fetch argument for the return address at a function's first instruction
    (`Architecture.uprobe_return_address`)."""
    arch = machine().arch
    if arch is None:
        raise CaptureError(
            f"uprobe: where a function's return address is on {machine().name} is unknown "
            "(pytest_lbr.kernel.arch.ARCHITECTURES has no row for it)"
        )
    return arch.uprobe_return_address


def _user_hits(
    target: Target,
    event: str,
    elf: ElfFunctions,
    tid: int,
    steps: list[Step],
) -> list[Hit]:
    """One hit per uprobe/uretprobe event line of this thread.

    A hit holds the thread's kernel calls since its previous hit of this target
    (or since the trace was armed, or the thread started), then the user-level
    edge: the call into the function (entry) or the return to the caller.
    Entry body: "(0xIP) caller=0xRET"; return body: "(0xFUNC <- 0xRET) ret=0xV".
    Run-time addresses are mapped back into the file with the function's own
    address (known from the symbol table), which gives the caller's name.
    """
    assert target.function is not None
    func_vaddr = elf.address(target.function)
    hits: list[Hit] = []
    kernel = Hit(target.spec)  # the kernel calls since the previous hit
    for step in steps:
        rec = step.record
        if step.kind != "event":
            append_step(kernel, step)
            continue
        if not isinstance(rec, EventRecord) or rec.name != event:
            continue
        addrs = _hex_fields(rec.body)
        if not addrs:
            continue
        entry = addrs[0]
        site = addrs[1] if len(addrs) > 1 else None
        bias = entry - func_vaddr
        hit = Hit(target.spec, cpu=rec.cpu, pid=tid, tid=tid, timestamp_ns=rec.ts_ns)
        hit.branches, hit.raw_branches = kernel.branches, kernel.raw_branches
        kernel = Hit(target.spec)
        func = Location(entry, target.function, 0, module=elf.path.name)
        if site is not None:
            found = elf.locate(site - bias)
            caller = Location(
                site,
                found[0] if found else None,
                found[1] if found else 0,
                module=elf.path.name,
            )
            if not _returns(target):
                branch = Branch(caller, func, "call")
            else:
                branch = Branch(func, caller, "ret")
            hit.branches.append(branch)
            hit.raw_branches.append(branch)
        if _returns(target):
            hit.retval = event_retval(rec.body)
        hits.append(hit)
    return hits


def _hex_fields(body: str) -> list[int]:
    """The probe address and the call site: "(0xA)", "(0xA <- 0xB)", "caller=0xB"."""
    out: list[int] = []
    for part in body.replace("(", " ").replace(")", " ").split():
        value = part.split("=", 1)[1] if part.startswith("caller=") else part
        if value.startswith("0x"):
            try:
                out.append(int(value, 16))
            except ValueError:
                continue
    return out
