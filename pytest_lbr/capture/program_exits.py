"""The graph backend's fexit hooks on BPF programs, kept for a session.

The function tracer cannot see a JITed BPF program return, so a graph trace of
a program gets each run's return value from the LBR tracer's fexit hook
(`HookSet`, no snapshots). Opening, loading (verifier) and attaching that hook
is a large part of a short trace's cost under TCG, and its attach target is
fixed at load, so a session keeps each program's hook: attached at the
program's first trace, switched on for each trace and off after it
(`HookSet.set_armed`, the tracer's ``lbr_armed``), closed with the session.

A kept hook keeps its program loaded (the fexit link holds it) after the test
that loaded it has closed it, which a test may check (examples/veth_xdp's
`nothing_left` asserts no BPF link is left after its teardown). So keeping is
off by default (`KEPT_PROGRAMS = 0`: each trace's hooks are closed when it
ends, as before); with `KEPT_PROGRAMS = n` a session keeps the last n programs'
hooks. Which programs may be kept (those loaded for the whole session or
module) is for the plugin to decide.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence

from pytest_lbr.capture.hooks import HookSet
from pytest_lbr.capture.records import RawHit
from pytest_lbr.libbpf import prog_info
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
KEPT_PROGRAMS = 0

#: (program id, tgid the hook filters for: 0 for every process)
_Key = tuple[int, int]


class SessionExits:
    """One session's kept fexit hooks, per (program, process filter).

    `take` hands out a trace's hooks armed; `ProgramExits.close` gives them
    back, disarmed; `close` (idempotent) releases every one.
    """

    def __init__(self) -> None:
        self._kept: OrderedDict[_Key, HookSet] = OrderedDict()
        self._lent: dict[int, _Key] = {}  # id(hooks) -> key, while a trace has them
        self._closed = False

    def take(self, targets: Sequence[Target], tgid: int) -> ProgramExits:
        """Armed fexit hooks on each program of `targets` (raises as `HookSet.attach`)."""
        taken: list[HookSet] = []
        try:
            for target in targets:
                taken.append(self._take_one(target, tgid))
        except BaseException:
            for hooks in taken:
                self.give_back(hooks)
            raise
        return ProgramExits(taken, self)

    def _take_one(self, target: Target, tgid: int) -> HookSet:
        key = (_program_id(target), tgid)
        hooks = self._kept.pop(key, None)
        if hooks is None:
            hooks = HookSet([target], snapshot=False, tgid=tgid)
            hooks.attach()
        else:
            hooks.drain()  # nothing is recorded while disarmed; nothing old is kept
        self._lent[id(hooks)] = key
        try:
            hooks.set_armed(True)
        except BaseException:
            self._lent.pop(id(hooks))
            hooks.close()
            raise
        return hooks

    def give_back(self, hooks: HookSet) -> None:
        """Disarm `hooks` and keep them for the program's next trace (or close them:
        the session is closed, or keeps enough programs)."""
        key = self._lent.pop(id(hooks), None)
        if key is None or self._closed:
            hooks.close()
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

    def close(self) -> None:
        """Release every kept hook (idempotent); hooks a trace still has are closed
        when it gives them back."""
        self._closed = True
        while self._kept:
            self._kept.popitem()[1].close()

    def __len__(self) -> int:
        return len(self._kept)


class ProgramExits:
    """One trace's fexit hooks, read as one `HookSet` of its program targets:
    a hit's `target` is its program's index in the list `take` was given."""

    def __init__(self, hooks: list[HookSet], session: SessionExits) -> None:
        self._hooks = hooks
        self._session: SessionExits | None = session
        self._lost_before = [h.lost for h in hooks]

    def drain(self) -> list[RawHit]:
        """Every hit still in the hooks' ring buffers."""
        out: list[RawHit] = []
        for i, hooks in enumerate(self._hooks):
            for raw in hooks.drain():
                raw.target = i
                out.append(raw)
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
    if target.prog_id is not None:
        return target.prog_id
    if target.prog_fd is not None:
        return int(prog_info(target.prog_fd)[0].id)
    from pytest_lbr.capture.progs import resolve_program

    with resolve_program(target) as ref:
        return ref.id
