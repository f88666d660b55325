"""What every kind of target answers (`TargetKind`), and what it is handed to answer.

A kind hooks the LBR tracer at its target (through `Hooking`, the hook set's
primitives), arms the graph backend's function tracer for it (`GraphArming`, the
capture's tables it fills in) and cuts its hits out of a thread's records
(`HitCutting`, one context's records as `build_hits` nested them). The backends
keep their I/O loops: a kind says what to do for one target, never reads a ring
buffer or tracefs's pipe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.graph.calls import SiteFinder, Step
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.hooks.state import Attached
from pytest_lbr.kernel.functions import filter_functions_text
from pytest_lbr.kernel.tracefs import Instance
from pytest_lbr.model import Hit
from pytest_lbr.targets import Target

if TYPE_CHECKING:  # pyelftools: imported only where a uprobe target's binary is read
    from pytest_lbr.capture.implied import ProgramFlow
    from pytest_lbr.symbols.elf import ElfFunctions

__all__ = ["GraphArming", "HitCutting", "Hooking", "Matcher", "TargetKind"]

#: Whether a code location (symbol, address) is a target's (its function, its program).
Matcher = Callable[[str, int], bool]


class Hooking(Protocol):
    """What the hook set (`pytest_lbr.capture.hooks.attacher.TargetAttaching`) offers a
    kind to hook its target with."""

    #: fentry (a snapshot at entry) rather than fexit (a return value too).
    fentry: bool

    def resolve_prog(self, target: Target) -> tuple[int, str, str]:
        """A program target's fd, function name and kallsyms name."""
        ...

    def attach_prog(self, index: int, target: Target, fd: int, func: str) -> None:
        """fentry/fexit on the program's function `func`."""
        ...

    def attach_trace(
        self, index: int, what: str, attach_fd: int, func: str, function: int = 0
    ) -> None:
        """fentry/fexit on kernel function `func` (`attach_fd` 0)."""
        ...

    def attach_glob(self, index: int, target: Target) -> Attached:
        """Every kernel function a glob target names hooked (kprobe.multi or its fallback)."""
        ...

    def shared_program(self, uprobe: bool, name: str) -> int:
        """Program `name` of the shared kprobe/tracepoint (or uprobe) object, loaded."""
        ...

    def keep_link(self, link: int | None, what: str) -> None:
        """Keep `link` (the set closes it), or raise why `what` failed."""
        ...


@dataclass
class GraphArming:
    """A graph capture's tables that arming its targets fills in (the backend's; each
    kind adds its target's row), and the instance the function tracer runs in."""

    inst: Instance
    matchers: list[Matcher] = field(default_factory=list)
    #: target index -> its event's name (a tracepoint, a kretprobe, a uprobe).
    events: dict[int, str] = field(default_factory=dict)
    #: kretprobe event name -> its function.
    returns: dict[str, str] = field(default_factory=dict)
    #: target index -> its binary's symbols (uprobes).
    user: dict[int, ElfFunctions] = field(default_factory=dict)
    #: Program target index -> its JITed functions' (kallsyms name, start), main first.
    starts: dict[int, list[tuple[str | None, int]]] = field(default_factory=dict)
    #: Program target -> its calls' flow (`pytest_lbr.capture.implied`).
    flows: dict[str, ProgramFlow | None] = field(default_factory=dict)
    #: The program targets: their returns come from fexit hooks.
    programs: list[int] = field(default_factory=list)
    _available: str | None = None

    def available(self) -> str:
        """The instance's `available_filter_functions`, read once."""
        if self._available is None:
            self._available = filter_functions_text(self.inst.root)
        return self._available


@dataclass
class HitCutting:
    """One context's records (a thread, or its interrupt work) and what a capture
    configured (`pytest_lbr.capture.graph.hits.build_hits`), for a kind to cut its hits."""

    tid: int
    records: list[FunctionRecord | EventRecord]
    #: The records nested into calls and returns (empty where no kind asked for them).
    steps: list[Step]
    matchers: Sequence[Matcher]
    events: dict[int, str]
    user: dict[int, ElfFunctions] | None
    #: Program target index -> every fexit record of the capture (the keys: the
    #: targets whose returns come from fexit).
    exits: dict[int, list[RawHit]]
    #: Program target index -> this context's fexit records.
    mine: dict[int, list[RawHit]]
    starts: dict[int, list[tuple[str | None, int]]]
    site_of: SiteFinder | None


class TargetKind:
    """One kind of target: its knowledge, asked by the hook set and both backends.

    A kind module subclasses it and is named once, in `pytest_lbr.capture.kinds.KINDS`.
    """

    #: The `Target.kind`s it handles.
    names: ClassVar[tuple[str, ...]] = ()
    #: Its hits are made by event records (a tracepoint's, a uprobe's), each with the
    #: thread's calls since the previous one.
    by_events: ClassVar[bool] = False
    #: Its hits end at their return event where the graph backend adds one (a kernel
    #: function's kretprobe).
    ends_at_return_event: ClassVar[bool] = False
    #: A system-wide graph trace of it can be narrowed to its call graph.
    narrows: ClassVar[bool] = False

    # -- the LBR tracer's hooks ----------------------------------------------------

    def shared_programs(
        self, target: Target, *, ret: bool, fallback: str
    ) -> list[tuple[bool, str]]:
        """The programs of the tracer's shared objects its hook uses: (in the uprobe
        object, program name); `ret`: return hooks; `fallback`: hooking a glob
        without kprobe.multi."""
        return []

    def attach(self, hooks: Hooking, index: int, target: Target) -> Attached:
        """Hook the tracer at `target` (target `index` of the set)."""
        raise CaptureError(f"{target.spec}: unknown target kind {target.kind!r}")

    def traced_symbol(self, func: str | None, ksym: str) -> str | None:
        """The symbol of the function a hit's hook traced (None: the hook has none);
        `func`: the hooked function, `ksym`: a program's kallsyms name."""
        return None

    # -- the graph backend ---------------------------------------------------------

    def arm_graph(self, arming: GraphArming, index: int, target: Target) -> None:
        """Set the function tracer up for `target` and add its rows to `arming`."""
        raise CaptureError(f"{target.spec}: not supported on the graph backend")

    def graph_hits(self, cut: HitCutting, index: int, target: Target) -> list[Hit]:
        """Target `index`'s hits in one context's records."""
        return []

    def hit_event(self, event: str, record: FunctionRecord | EventRecord) -> bool:
        """Whether `record` is the event that makes a hit (`event`: the target's event)."""
        return False
