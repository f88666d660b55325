"""Attach the LBR tracer (bpf/lbr_tracer.bpf.c) at every target and read its hits.

`HookSet(targets, snapshot=...)` loads the tracer once for the kprobe,
kprobe.multi, tracepoint and uprobe kinds, and once more per fentry/fexit
target (their attach target is fixed at load time). Every object of a set shares
the first one's ring buffer, per-CPU snapshot slots, lost counter and armed switch
through reused map fds; the large maps may come from a session's spare sets
(`capture/hooks/tracer_maps.py`). The class keeps the lifecycle (attach, close, the
spare maps' return); its jobs are its bases: `TracerLoading` (loader.py),
`TargetAttaching` (attacher.py) and `RingReading` (ring.py). Nothing is pinned; `close()` releases every link and object, also when
attaching fails half way.
"""

from __future__ import annotations

import os
from types import TracebackType

from pytest_lbr.bpf.libbpf import (
    lib,
)
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.attacher import TargetAttaching
from pytest_lbr.capture.hooks.ring import RingReading
from pytest_lbr.capture.hooks.state import DEFAULT_GLOB_FALLBACK
from pytest_lbr.capture.hooks.tracer_maps import POOLED, MapSet
from pytest_lbr.capture.hooks.tracer_object import (
    tracer_not_built,
    tracer_object,
)

__all__ = ["DEFAULT_GLOB_FALLBACK", "HookSet", "try_load_fexit"]


class HookSet(TargetAttaching, RingReading):
    """The tracer attached at every target; a context manager.

    `snapshot=False` skips bpf_get_branch_snapshot() (hits only). Exit hooks
    (fexit, kretprobe, uretprobe) report the return value; `fentry=True` hooks
    BPF programs and kernel functions on entry instead. `tgid` limits kernel
    hooks to one process (default: this one; 0: all); `children` also follows
    the processes it forks while attached (and theirs); `cgroup` (a cgroup v2
    directory) keeps the tasks in it and its descendants instead. `interrupts`
    keeps hits in interrupt context (default: only where every task is traced,
    tgid 0); `skip_tgid` is never recorded. The kernel filters: uprobes see every
    process but `skip_tgid`. `maps` (a session's `TracerMaps`) lends the large
    maps the set's objects share and takes them back at `close` when they are
    clean; the lost counter and the armed switch are always the set's own.
    `kernel_config=False` leaves the kernel addresses and offsets out of the
    tracer's config (a probe that only loads needs none; finding them reads
    kallsyms and the kernel's BTF). With `maps`, a
    fentry/fexit hook on a BPF program is loaded again from the session's first
    load of it where the set's shared maps are lent (`tracer_maps.TracerImage`).
    """

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> HookSet:
        self.attach()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def attach(self) -> None:
        """Load and attach everything; on any error release what was made and re-raise."""
        try:
            self._object = tracer_object()
        except FileNotFoundError as exc:
            raise CaptureError(tracer_not_built(exc.filename)) from None
        try:
            if self._maps is not None and not self._shared:
                self._lent = self._maps.lend()
                if self._lent is not None:
                    self._shared = dict(self._lent.fds)
                    self._ring = self._lent.ring
            if self.children and self.tgid:
                self._attach_fork()
            for index, target in enumerate(self.targets):
                self.attached.append(self._attach_one(index, target))
            self._open_ringbuf()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Destroy every link, ring buffer and object (idempotent); give the maps
        back to the session's spare sets (`maps`) when they are clean."""
        clean = self._clean_maps()
        linked = bool(self._links or self._link_fds)
        while self._links:
            lib.bpf_link__destroy(self._links.pop())
        while self._link_fds:
            os.close(self._link_fds.pop())
        ring, self._ring = self._ring, None
        if ring is None:
            clean = clean and not linked  # the hooks may have written what nobody read
        elif clean:  # every link is gone: read what they wrote, so nothing is left
            try:
                ring.consume()
            except OSError:
                clean = False
            ring.records.clear()
        spare = self._lent
        if clean and spare is None and ring is not None:
            # The first object's maps and this set's reader: the set outlives them.
            spare = MapSet({key: os.dup(self._shared[key]) for key in POOLED}, ring)
        while self._objs:
            lib.bpf_object__close(self._objs.pop())
        while self._own_fds:
            os.close(self._own_fds.pop())
        self._images.clear()
        while self._refs:
            self._refs.pop().close()
        self._base = self._uprobe_obj = None
        self._shared.clear()
        self._lent = None
        if spare is not None and self._maps is not None:
            if clean:
                self._maps.give_back(spare)
            else:
                self._maps.discard(spare)
        elif ring is not None:
            ring.close()

    def _clean_maps(self) -> bool:
        """Whether this set's pooled maps may serve another hook set once read to
        the end: a session lends them, they hold no followed tgids, and every hook
        was disarmed first (or none was loaded: a lent set is as it came)."""
        if self._maps is None or (self.children and self.tgid):
            return False
        if "armed" not in self._shared:
            return True
        try:
            self.set_armed(False)  # before the links go: no hook writes after the read
        except (CaptureError, OSError):
            return False
        return True

    @property
    def link_fds(self) -> list[int]:
        """fds of the BPF links made (for tests: `bpftool link show`, link info)."""
        return [lib.bpf_link__fd(link) for link in self._links] + self._link_fds


def try_load_fexit(function: str = "vfs_write") -> None:
    """Load (never attach) the fexit tracer on `function`: raises if this kernel refuses."""
    # Whether it loads does not depend on the addresses it would read (0: none read);
    # finding them reads /proc/kallsyms, which a session probing the LBR
    # backend to end up on the graph backend with kernel functions never needs.
    hs = HookSet([], snapshot=True, kernel_config=False)  # never attached: one load
    try:
        hs.load_fexit(function)
    finally:
        hs.close()
