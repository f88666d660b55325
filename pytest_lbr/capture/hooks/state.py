"""The state a `HookSet` keeps, declared once for the three jobs it is split into
(`loader.py`, `attacher.py`, `ring.py`): its targets and scope, the objects and
links it made, the maps its objects share and the reader of their ring buffer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_lbr.targets import Target

if TYPE_CHECKING:
    from pytest_lbr.capture.hooks.tracer_maps import MapSet, RingReader, TracerMaps

__all__ = ["Attached", "HookState"]


@dataclass
class Attached:
    """What one target resolved to: its functions (globs expand) and how it is hooked."""

    target: Target
    functions: list[str]
    how: str = ""
    #: kallsyms name of a BPF program target (bpf_prog_<tag>_<name>).
    ksym: str = ""


class HookState:
    """Attributes only: `HookSet.__init__` sets them."""

    targets: list[Target]
    snapshot: bool
    fentry: bool
    tgid: int
    children: bool
    cgroup: str | None
    interrupts: bool
    skip_tgid: int
    fallback: str
    attached: list[Attached]
    notes: list[str]
    _objs: list[int]
    _images: list[Any]
    _links: list[int]
    _base: int | None
    _uprobe_obj: int | None
    _ring: RingReader | None
    _shared: dict[str, int]
    _maps: TracerMaps | None
    _lent: MapSet | None
    _refs: list[Any]
    _object: Path | None
    _kernel_config: bool
