"""The state a `HookSet` keeps, declared once for the three jobs it is split into
(`loader.py`, `attacher.py`, `ring.py`): its targets and scope, the objects and
links it made, the maps its objects share and the reader of their ring buffer."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_lbr.targets import Target

if TYPE_CHECKING:
    from pytest_lbr.capture.hooks.tracer_maps import MapSet, RingReader, TracerMaps

__all__ = ["DEFAULT_GLOB_FALLBACK", "Attached", "HookState"]

#: How a glob is attached where kprobe.multi is missing, unless asked otherwise:
#: kprobe attaches one link per function to one loaded program; fentry loads and
#: verifies one object per function, each holding ~7 fds (program, link, BTF, reused
#: maps), so a glob of hundreds of functions runs into RLIMIT_NOFILE (EMFILE), and
#: some functions refuse fexit (ENOTSUPP). So kprobe is the default: it scales to a
#: whole subsystem glob (bench/RESULTS-history.md, 2026-11-22, has the figures).
DEFAULT_GLOB_FALLBACK = "kprobe"


@dataclass
class Attached:
    """What one target resolved to: its functions (globs expand) and how it is hooked."""

    target: Target
    functions: list[str]
    how: str = ""
    #: kallsyms name of a BPF program target (bpf_prog_<tag>_<name>).
    ksym: str = ""


class HookState:
    """The attributes every job of a `HookSet` reads, set once here (the arguments
    are `HookSet`'s: its docstring says what each means)."""

    def __init__(
        self,
        targets: list[Target],
        *,
        snapshot: bool,
        fentry: bool = False,
        tgid: int | None = None,
        children: bool = False,
        cgroup: str | None = None,
        interrupts: bool | None = None,
        skip_tgid: int = 0,
        fallback: str = DEFAULT_GLOB_FALLBACK,
        maps: TracerMaps | None = None,
        kernel_config: bool = True,
    ) -> None:
        self.targets = list(targets)
        self.snapshot = snapshot
        self.fentry = fentry
        self.tgid = os.getpid() if tgid is None else tgid
        self.children = children
        self.cgroup = cgroup
        self.interrupts = self.tgid == 0 and cgroup is None if interrupts is None else interrupts
        #: A process never recorded, whatever the scope (a live reader's own).
        self.skip_tgid = skip_tgid
        #: How a glob is attached where kprobe.multi is missing: "kprobe" or "fentry".
        self.fallback = fallback
        self.attached: list[Attached] = []
        #: Notes for the trace (e.g. "kfunc:tcp_*: kprobe.multi unavailable (EOPNOTSUPP)").
        self.notes: list[str] = []
        self._objs: list[int] = []
        #: Each object's copy of the tracer's bytes: libbpf reads them until load.
        self._images: list[Any] = []
        self._links: list[int] = []
        #: Links, programs and maps made without libbpf (`TracerImage`): closed by fd.
        self._link_fds: list[int] = []
        self._own_fds: list[int] = []
        self._base: int | None = None
        self._uprobe_obj: int | None = None
        #: The ring's reader: the lent set's, or made once the first object loaded.
        self._ring: RingReader | None = None
        self._shared: dict[str, int] = {}
        #: The session's spare map sets: this set's maps come from there and go back.
        self._maps = maps
        #: The set `maps` lent (this hook set's until `close`).
        self._lent: MapSet | None = None
        self._refs: list[Any] = []
        self._object: Path | None = None
        self._kernel_config = kernel_config
