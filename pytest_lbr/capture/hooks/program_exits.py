"""fexit hooks on BPF programs, kept for a session while their programs are open.

The function tracer cannot see a JITed BPF program return, so a graph trace of
a program gets each run's return value from the LBR tracer's fexit hook
(`HookSet`, no snapshots); the LBR backend's trace of a program is that hook
with snapshots. Opening, loading (verifier) and attaching a hook is most of a
short trace's cost, and its attach target is fixed at load, so a
session keeps each program's hook: attached at the program's first trace,
switched on for each trace and off after it (`HookSet.set_armed`, the tracer's
``lbr_armed``).

A kept hook holds its program loaded (the fexit link holds it), which a test
may check after its teardown (examples/veth_xdp's `nothing_left` asserts no BPF
link is left). So only hooks on programs of a `pytest_lbr.bpf.BpfObject` are
kept, and only until that object closes (`BpfObject.on_close`): a program of
any other loader (bcc, an fd, an id) gets a hook of its own per trace, closed
when the trace ends. At most `KEPT_PROGRAMS` hooks are kept, the least recently
traced going first: each holds a 4 MiB ring buffer, mapped into this process
(twice, for wrap-around: up to 8 MiB of its RSS) while the hook is kept.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pytest_lbr.bpf.libbpf import prog_info
from pytest_lbr.capture.hooks.hook_set import HookSet
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.hooks.tracer_maps import TracerMaps
from pytest_lbr.targets import Target

__all__ = [
    "KEPT_PROGRAMS",
    "ProgramExits",
    "SessionExits",
    "release_session_exits",
    "session_exits",
]

#: Programs whose fexit hooks one session keeps (least recently traced goes
#: first); 0: none, every trace closes its own (see the module docstring).
KEPT_PROGRAMS = 4

#: (program id, tgid the hook filters for (0: every process), snapshot, interrupts)
_Key = tuple[int, int, bool, bool]


class SessionExits:
    """One session's kept fexit hooks, per (program, process filter, snapshot).

    `take` hands out a trace's hooks armed; `ProgramExits.close` gives them
    back, disarmed; `close` (idempotent) releases every one.
    """

    def __init__(self) -> None:
        self._kept: OrderedDict[_Key, HookSet] = OrderedDict()
        #: id(hooks) -> (key, whether it may be kept), while a trace has them.
        self._lent: dict[int, tuple[_Key, bool]] = {}
        #: Programs whose object's close is watched (`BpfObject.on_close`).
        self._watched: set[int] = set()
        #: Programs closed while a trace had their hooks: closed when given back.
        self._gone: set[int] = set()
        #: Spare tracer map sets for this session's hook sets, kept or not.
        self.maps = TracerMaps()
        self._closed = False

    def take(
        self,
        targets: Sequence[Target],
        tgid: int | None,
        *,
        snapshot: bool = False,
        interrupts: bool | None = None,
    ) -> ProgramExits:
        """Armed fexit hooks on each program of `targets` (raises as `HookSet.attach`);
        `snapshot`, `interrupts` and `tgid` as `HookSet` takes them."""
        taken: list[HookSet] = []
        try:
            for target in targets:
                taken.append(self._take_one(target, tgid, snapshot, interrupts))
        except BaseException:
            for hooks in taken:
                self.give_back(hooks)
            raise
        return ProgramExits(taken, self)

    def _take_one(
        self, target: Target, tgid: int | None, snapshot: bool, interrupts: bool | None
    ) -> HookSet:
        prog_id = _program_id(target)
        keep = self._watch(target, prog_id)
        # A kept hook must not keep the user's object alive (its close releases the hook).
        fresh = HookSet(
            [dataclasses.replace(target, obj=None) if keep else target],
            snapshot=snapshot,
            tgid=tgid,
            interrupts=interrupts,
            maps=self.maps,
        )
        key = (prog_id, fresh.tgid, snapshot, fresh.interrupts)
        hooks = self._kept.pop(key, None)
        if hooks is None:
            hooks = fresh
            hooks.attach()
        else:
            hooks.drain()  # nothing is recorded while disarmed; nothing old is kept
        self._lent[id(hooks)] = (key, keep)
        try:
            hooks.set_armed(True)
        except BaseException:
            self._lent.pop(id(hooks))
            hooks.close()
            raise
        return hooks

    def _watch(self, target: Target, prog_id: int) -> bool:
        """Whether `target`'s hook may outlive the trace: its program belongs to a
        `BpfObject`, which releases the hook when it closes."""
        from pytest_lbr.bpf import Program

        program = target.obj
        if KEPT_PROGRAMS <= 0 or not isinstance(program, Program) or program.object.closed:
            return False
        if prog_id not in self._watched:
            program.object.on_close(functools.partial(_program_closed, weakref.ref(self), prog_id))
            self._watched.add(prog_id)
        return True

    def give_back(self, hooks: HookSet) -> None:
        """Disarm `hooks` and keep them for the program's next trace (or close them:
        the program or the session is closed, the program's loader is not
        watched, or the session keeps enough programs)."""
        key, keep = self._lent.pop(id(hooks), (None, False))
        if key is None or not keep or self._closed or key[0] in self._gone:
            hooks.close()
            if key is not None and not any(k[0] == key[0] for k, _ in self._lent.values()):
                self._gone.discard(key[0])
            return
        try:
            hooks.set_armed(False)
            hooks.drain()
        except BaseException:
            hooks.close()
            raise
        old = self._kept.pop(key, None)  # a program traced twice in one trace
        if old is not None:
            old.close()
        self._kept[key] = hooks
        while len(self._kept) > KEPT_PROGRAMS:
            self._kept.popitem(last=False)[1].close()

    def release_program(self, prog_id: int) -> None:
        """Close the hooks kept on program `prog_id` (its object is closing); those a
        trace has now are closed when it gives them back."""
        self._watched.discard(prog_id)
        for key in [k for k in self._kept if k[0] == prog_id]:
            self._kept.pop(key).close()
        if any(k[0] == prog_id for k, _ in self._lent.values()):
            self._gone.add(prog_id)

    def close(self) -> None:
        """Release every kept hook (idempotent); hooks a trace still has are closed
        when it gives them back."""
        self._closed = True
        while self._kept:
            self._kept.popitem()[1].close()
        self.maps.close()

    def __len__(self) -> int:
        return len(self._kept)


def _program_closed(exits: weakref.ref[SessionExits], prog_id: int) -> None:
    """`BpfObject.on_close` callback: the session (if still there) lets the hooks go."""
    session = exits()
    if session is not None:
        session.release_program(prog_id)


class ProgramExits:
    """One trace's fexit hooks, read as one `HookSet` of its program targets:
    a hit's `target` is its program's index in the list `take` was given."""

    def __init__(self, hooks: list[HookSet], session: SessionExits) -> None:
        self._hooks = hooks
        self._session: SessionExits | None = session
        self._lost_before = [h.lost for h in hooks]

    @property
    def attached(self) -> list[Any]:
        """What each program target resolved to (`HookSet.attached`), in order."""
        return [a for h in self._hooks for a in h.attached]

    @property
    def notes(self) -> list[str]:
        """The hook sets' notes."""
        return [n for h in self._hooks for n in h.notes]

    def drain(self) -> list[RawHit]:
        """Every hit still in the hooks' ring buffers, oldest first."""
        out: list[RawHit] = []
        for i, hooks in enumerate(self._hooks):
            for raw in hooks.drain():
                raw.target = i
                out.append(raw)
        if len(self._hooks) > 1:  # one ring buffer per program
            out.sort(key=lambda raw: raw.ts_ns)
        return out

    @property
    def lost(self) -> int:
        """Hits the kernel dropped during this trace (ring buffer full)."""
        return sum(
            h.lost - before for h, before in zip(self._hooks, self._lost_before, strict=True)
        )

    def close(self) -> None:
        """Give the hooks back to the session, disarmed (idempotent)."""
        session, self._session = self._session, None
        if session is None:
            return
        hooks, self._hooks = self._hooks, []
        errors: list[BaseException] = []
        for h in hooks:
            try:
                session.give_back(h)
            except BaseException as exc:  # every hook is given back whatever one raises
                errors.append(exc)
        if errors:
            raise errors[0]


_SESSIONS: weakref.WeakKeyDictionary[object, SessionExits] = weakref.WeakKeyDictionary()


def session_exits(owner: object) -> SessionExits:
    """The kept hooks of the session `owner` stands for (its graph recorder),
    released when `owner` goes away (or at interpreter exit)."""
    exits = _SESSIONS.get(owner)
    if exits is None:
        exits = _SESSIONS[owner] = SessionExits()
        weakref.finalize(owner, exits.close)
    return exits


def release_session_exits(owner: object) -> None:
    """Release the kept hooks of the session `owner` stands for, if it has any."""
    exits = _SESSIONS.pop(owner, None)
    if exits is not None:
        exits.close()


def _program_id(target: Target) -> int:
    """The kernel's id of the program a "prog" target names (ids are never reused
    while the program lives; fd numbers are)."""
    from pytest_lbr.bpf import Program

    if target.prog_id is not None:
        return target.prog_id
    if isinstance(target.obj, Program):
        return target.obj.id
    if target.prog_fd is not None:
        return int(prog_info(target.prog_fd)[0].id)
    from pytest_lbr.programs.find import resolve_program

    with resolve_program(target) as ref:
        return ref.id
