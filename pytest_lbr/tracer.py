"""`Tracer`: the object behind the `lbr` fixture, usable without pytest too.

    with Tracer(backend="auto") as tracer:
        with tracer.trace("kfunc:vfs_write") as trace:
            os.write(fd, b"x")
    assert trace.called("write_null")

This is the one place that runs the pipeline: capture (raw hits from a
backend) -> symbols (names and file:line for every address) -> the LBR
tracer's own branches trimmed -> the finished `Trace`.
"""

from __future__ import annotations

import importlib
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pytest_lbr.capture import (
    Backend,
    Capabilities,
    Capture,
    CaptureError,
    Scope,
    resolve_backend,
)
from pytest_lbr.model import CALL_KINDS, Branch, Hit, Location, ProgramCalls, Trace
from pytest_lbr.names import BackendName, LbrFilter, PmuName, ScopeKind, parse_name
from pytest_lbr.programs.written import WrittenPrograms
from pytest_lbr.targets import Target, parse_targets

__all__ = [
    "Tracer",
    "TracingUnavailable",
    "add_source_lines",
    "finish",
]

#: The branches whose source is a call site: calls, and a program's calls the graph
#: backend proves from its code ("implied").
_CALLS = (*CALL_KINDS, "implied")

#: What naming a trace's addresses imports, imported by `Tracer.prepare` before the
#: traced code: an import in the traced process can make directories (pytest's
#: assertion rewriting calls mkdir(2) for each plugin module it loads).
NAMING_MODULES = (
    "pytest_lbr.symbols",
    "pytest_lbr.symbols.disasm",
    "pytest_lbr.symbols.known",
    "pytest_lbr.capture.call_sites",
)

#: A trace's note when `trace()` had to probe its backend first (`Tracer.prepare` not called).
PROBE_NOTE = (
    "this trace probed the {} backend first, in this process (the graph backend's "
    "probe makes and removes a tracefs instance: mkdir, rmdir): call "
    "Tracer.prepare() before the traced code"
)

#: A trace's note when naming its addresses started llvm-symbolizer (`{}`: how many)
#: before the `trace()` block ended: forks of this process a user's program may count.
SYMBOLIZER_NOTE = (
    "naming kernel file:line started {} llvm-symbolizer process(es) in this process "
    "as the trace ended (several: each from a thread of its own): a program counting "
    "this process's forks counted them too (the line cache in "
    "~/.cache/pytest-lbr/lines spares the next run)"
)


class TracingUnavailable(CaptureError):
    """The chosen backend cannot run on this machine; `reason` says why."""


class Tracer:
    """Arms tracing around a block and hands back a fully collected `Trace`.

    `backend` is a name (`BackendName`: "auto", "lbr", "graph"), probed on first use, or a
    `Backend` already resolved (the pytest plugin shares one per session, so
    probing and the graph backend's set-up happen once, not per test). What a
    tracer resolved itself it releases at `close()` (or when used as a context
    manager, or when garbage collected); a shared `Backend` is its owner's.
    `vmlinux` is the debug vmlinux that gives kernel addresses their file:line
    (None: auto-discovered; the pytest plugin passes --lbr-vmlinux). `filter`, `scope`
    and `pmu` are an `LbrFilter`, a `ScopeKind` and a `PmuName`; a name that is none
    of them is a ValueError here, not at the first trace. `written`: the book of
    instructions a `BpfLoader` loaded its programs from (`loader.written`; the pytest
    plugin passes the `bpf` fixture's): its programs' helper calls are told as their
    C wrote them (inlined, rewritten, removed), others' from the calls the kernel
    still makes alone.
    """

    def __init__(
        self,
        backend: str | Backend = "auto",
        filter: str | None = None,
        vmlinux: str | None = None,
        scope: str = "process",
        pmu: str = "hardware",
        written: WrittenPrograms | None = None,
    ) -> None:
        if isinstance(backend, str):
            backend = parse_name(BackendName, backend)
        chosen_pmu = parse_name(PmuName, pmu)
        #: The PMU backends this tracer resolves itself run on (`--lbr-pmu`; a shared
        #: `Backend` carries its own).
        self.pmu = backend.pmu if isinstance(backend, Backend) else chosen_pmu
        self._filter = _filter(filter)
        #: The scope of a `trace()` that names none (the plugin's ini key `lbr_scope`).
        self.scope: str = parse_name(ScopeKind, scope)
        self._wanted = backend if isinstance(backend, str) else backend.requested
        self._vmlinux = vmlinux
        #: What the programs of the loader it was given were loaded from (None: none).
        self.written = written
        self._shared = backend if isinstance(backend, Backend) else None
        #: Backends this tracer resolved itself, by the name asked for (it closes them).
        self._own: dict[str, Backend] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._own)
        #: Every trace taken through this tracer, in order (reports read them).
        self.traces: list[Trace] = []
        #: Set by the pytest plugin: compares a trace with the test's golden file.
        self.golden_checker: Callable[..., None] | None = None
        #: Called with each finished trace and its parsed targets, while the traced
        #: programs are still loaded (the pytest plugin's coverage reads them).
        self.finished: list[Callable[[Trace, list[Target]], None]] = []

    # -- what the contract exposes --------------------------------------------

    def prepare(self) -> None:
        """Set up now what the first `trace()` would set up in this process: the
        backend probed, what it keeps between traces (the graph backend's tracefs
        instance, made with mkdir), the modules a trace imports. Call it before
        attaching programs that count this process's calls (the pytest plugin's
        `lbr` fixture does, before the test body). Idempotent."""
        self._resolve().prepare()
        for module in NAMING_MODULES:
            importlib.import_module(module)

    @property
    def backend(self) -> str:
        """The backend in use: "lbr" or "graph" ("auto" resolved on this machine)."""
        return self._resolve().name

    @property
    def available(self) -> bool:
        """True if the backend can trace on this machine."""
        return self._resolve().capability.available

    @property
    def reason(self) -> str:
        """Why tracing is unavailable ("" when it is available)."""
        return self._resolve().capability.reason

    @contextmanager
    def trace(
        self,
        *targets: Any,
        backend: str | None = None,
        filter: str | None = None,
        scope: str | None = None,
        pid: int | None = None,
        cgroup: str | None = None,
    ) -> Iterator[Trace]:
        """Arm on `targets` for the duration of the block, yield the `Trace`.

        `scope` says whose work is recorded (default: the tracer's `scope`):
        "process" (this process's threads),
        "children" (also the processes they start while armed, and theirs)
        or "system" (every task, and interrupt context). `pid=N`
        records process N instead of this one (with "children", also what it
        starts); `cgroup=PATH` every task of that cgroup v2 directory and its
        descendants (relative paths are under /sys/fs/cgroup), and interrupt context.
        Each hit says where it ran (`cpu`, `pid`, `tid`, `comm`, `in_interrupt`).
        The trace is empty inside the block and complete after it. On exit, whatever
        happened inside, the trace is disarmed and the kernel objects made for it
        alone are released. What a session keeps between traces stays: the graph
        backend's function-tracer instance and spare sets of the LBR tracer's maps,
        until the tracer closes, and the hook on a program of a `BpfObject`, until
        that object closes (or the tracer does; `capture/hooks/program_exits.py`).
        """
        parsed = parse_targets(targets)
        chosen_filter = _filter(filter) or self._filter
        whose = Scope.of(scope or self.scope, pid=pid, cgroup=cgroup)
        probes = len(self._own)
        chosen = self._resolve(parse_name(BackendName, backend) if backend else None)
        probed = len(self._own) > probes
        cap = chosen.capability
        if not cap.available:
            raise TracingUnavailable(f"{cap.backend} backend unavailable: {cap.reason}")
        if chosen_filter and not chosen.capabilities.filters:
            chosen_filter = None  # branch filters are an LBR feature; graph records calls
        capture = chosen.open(parsed, filter=chosen_filter, scope=whose)
        trace = Trace(targets=[t.spec for t in parsed], backend=cap.backend)
        self.traces.append(trace)
        try:
            capture.start()
            yield trace
            done = capture.stop()
            stopped = time.monotonic()
        finally:
            capture.close()
        from pytest_lbr.symbols import processes_started

        spawned = processes_started(self._vmlinux)
        finish(
            capture,
            done.hits,
            self._vmlinux,
            chosen.capabilities,
            recorded_by=stopped,
            written=self.written,
        )
        spawned = processes_started(self._vmlinux) - spawned
        if spawned:
            done.notes.append(SYMBOLIZER_NOTE.format(spawned))
        if probed:
            done.notes.insert(0, PROBE_NOTE.format(cap.backend))
        trace.complete_from(done)
        from pytest_lbr.symbols.known import TracerNames

        trace.known = TracerNames(parsed, self.written)
        for listener in self.finished:
            listener(trace, parsed)

    def check_golden(self, trace: Trace, name: str | None = None, level: str = "function") -> None:
        """Compare `trace` with the test's golden trace (or write it under --lbr-golden-update)."""
        if self.golden_checker is None:
            raise RuntimeError("check_golden needs the pytest plugin (use the `lbr` fixture)")
        self.golden_checker(trace, name=name, level=level)

    def close(self) -> None:
        """Release what this tracer set up itself (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------

    def _resolve(self, backend: str | None = None) -> Backend:
        wanted = backend or self._wanted
        if self._shared is not None and wanted in (self._wanted, self._shared.name):
            return self._shared
        if wanted not in self._own:  # a `BackendName`: checked where it was given
            self._own[wanted] = resolve_backend(wanted, pmu=self.pmu)
        return self._own[wanted]


def _close_all(backends: dict[str, Backend]) -> None:
    for b in backends.values():
        b.close()
    backends.clear()


def finish(
    capture: Capture,
    hits: list[Hit],
    vmlinux: str | None,
    capabilities: Capabilities,
    recorded_by: float | None = None,
    written: WrittenPrograms | None = None,
) -> list[Hit]:
    """The one step from a capture's hits to a trace's, for a whole trace
    (`Tracer.trace`) and for each batch of a live one (`LiveTrace`): every branch end
    named with the symbolizer's name and file:line (`add_source_lines`; the backend's
    `capabilities` say what a call's source address is), then the capture's `trim`,
    which cuts what the tracer itself ran and needs those names (`written`: as
    `add_source_lines`). Returns `hits`, changed in place."""
    add_source_lines(
        hits,
        vmlinux,
        recorded_by=recorded_by,
        call_source_is_return=capabilities.call_source_is_return,
        written=written,
    )
    capture.trim(hits)
    return hits


def add_source_lines(
    hits: list[Hit],
    vmlinux: str | None = None,
    recorded_by: float | None = None,
    call_source_is_return: bool = False,
    written: WrittenPrograms | None = None,
) -> None:
    """Give each branch end the symbolizer's name and file:line where it knows the address
    (`vmlinux`: the debug vmlinux to read lines from; None: auto-discovered;
    `recorded_by`: when the hits were all recorded, and `written`: the book of the
    loader whose programs' helper calls are told as written, `Symbolizer.locate_many`).

    The graph backend names functions from ftrace's text, kept where the
    symbolizer knows no better; the LBR backend gives bare addresses.
    `call_source_is_return`: a call's source address is where the call returns to
    (`Capabilities.call_source_is_return`): it keeps that address, with the
    function, offset and file:line of the byte before it, the call's own (the
    instruction after a call can be another line: a program's `return`).
    """
    addrs = {loc.addr for h in hits for b in h.branches for loc in (b.src, b.dst)}
    if not addrs:
        return
    if call_source_is_return:
        addrs |= {b.src.addr - 1 for h in hits for b in h.branches if b.kind in _CALLS}
    from pytest_lbr.symbols import get_symbolizer

    # Names the backend gave (the function tracer's) stand where kallsyms is stale.
    given = {loc.addr for h in hits for b in h.branches for loc in (b.src, b.dst) if loc.symbol}
    found = get_symbolizer(vmlinux).locate_many(sorted(addrs), recorded_by, given, written)

    def better(loc: Location) -> Location:
        new = found.get(loc.addr)
        if new is None or new.symbol is None:
            return loc
        return new

    shifted: dict[int, Location] = {}  # a call site comes back hit after hit

    def call_source(loc: Location) -> Location:
        out = shifted.get(loc.addr)
        if out is None:
            new = found.get(loc.addr - 1)
            if new is None or new.symbol is None:
                out = better(loc)
            else:
                out = replace(new, addr=loc.addr, offset=new.offset + 1)
            shifted[loc.addr] = out
        return out

    # A hit's branches and raw branches share objects: each is named once (the memo
    # holds `b` too, so no id is reused while it runs). Built directly, not with
    # dataclasses.replace: a live trace names thousands a second.
    done: dict[int, tuple[Branch, Branch]] = {}

    def named(b: Branch) -> Branch:
        memo = done.get(id(b))
        if memo is not None:
            return memo[1]
        returns = call_source_is_return and b.kind in _CALLS
        src, dst = call_source(b.src) if returns else better(b.src), better(b.dst)
        if b.kind in _CALLS and src.program is not None and dst.module is None:
            dst = helper_called(src.program, dst)
        out = b
        if src is not b.src or dst is not b.dst:
            out = Branch(src, dst, b.kind, b.mispredicted, b.cycles)
        done[id(b)] = (b, out)
        return out

    # A program's call of a kernel function, named with the helper that program's
    # C wrote for it (`ProgramCalls.helper_of`): the same function called from
    # elsewhere (the map syscall's update) is no helper call.
    as_helper: dict[tuple[int, int], Location] = {}

    def helper_called(prog: ProgramCalls, dst: Location) -> Location:
        key = (prog.prog_id, dst.addr)
        out = as_helper.get(key)
        if out is None:
            helper = prog.helper_of(dst.symbol)
            out = dst if helper is None or helper == dst.helper else replace(dst, helper=helper)
            as_helper[key] = out
        return out

    for h in hits:
        h.branches = [named(b) for b in h.branches]
        h.raw_branches = [named(b) for b in h.raw_branches]


def _filter(filter: str | None) -> LbrFilter | None:
    """The LBR filter a user named (None: none named; ValueError: not an `LbrFilter`)."""
    return None if filter is None else parse_name(LbrFilter, filter)
