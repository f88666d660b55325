"""The hardware LBR backend: probe it, capture with it, decode its records.

`probe_lbr()` says whether LBR tracing can work here and, if not, exactly why.
`LbrBackend` is the backend as the registry of `pytest_lbr.capture` knows it
(what it can do: `LBR_CAPABILITIES`). `LbrCapture` opens one branch-stack perf event per CPU (so the CPU records),
attaches the tracer at every target (`HookSet(snapshot=True)`), and turns each
hit's perf_branch_entry records into `Branch`es between bare addresses, oldest
first, the tracer's own newest records included: `pytest_lbr.tracer` names the
addresses and trims those off. The decode functions are pure so host tests can
check them.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_lbr.capture.base import (
    LIVE_OWN_PROCESS,
    BackendDriver,
    Capabilities,
    Capability,
    Capture,
    CaptureError,
    Scope,
    as_scope,
)
from pytest_lbr.capture.implied import program_returns, typed_returns
from pytest_lbr.capture.lbr.decode import decode_trace
from pytest_lbr.capture.trim import trim_tracer_hits
from pytest_lbr.kernel.machine import BTF_PATH, Machine
from pytest_lbr.kernel.machine import machine as running_machine
from pytest_lbr.model import Hit, Trace
from pytest_lbr.names import PmuName
from pytest_lbr.targets import Target, TargetError

if TYPE_CHECKING:
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.capture.hooks.program_exits import ProgramExits

__all__ = [
    "LBR_CAPABILITIES",
    "LBR_SOFTWARE_CAPABILITIES",
    "NO_BRANCHES_NOTE",
    "PMUS",
    "LbrBackend",
    "LbrSoftwareBackend",
    "LbrCapture",
    "branch_events_problem",
    "probe_lbr",
]

# -- probing ------------------------------------------------------------------------

_CAP_PERFMON, _CAP_BPF = 38, 39
_BPF_PROG_TYPE_KPROBE = 2
_BPF_FUNC_get_branch_snapshot = 176
_probed: dict[tuple[int, str], Capability] = {}

#: The PMUs the LBR backend runs on (`--lbr-pmu`, `PmuName`): "hardware" takes the
#: CPU's branch records at every hit; "software" opens software-clock perf events
#: instead and records every hit (who, where, retval, loss) without branches, where no
#: CPU has LBR.
PMUS = tuple(PmuName)

#: The note a trace taken on software perf events carries.
NO_BRANCHES_NOTE = (
    "no branches: the lbr backend ran on software perf events (--lbr-pmu=software, "
    "pytest-lbr trace --pmu software): hits say who, where and retval, not the branches"
)


def probe_lbr(pmu: str = "hardware") -> Capability:
    """Can the LBR backend trace here (on `pmu`, one of `PMUS`)? Cached per process;
    never raises."""
    key = (os.getpid(), pmu)
    if key not in _probed:
        try:
            reason = _probe_hooks() or (_probe() if pmu == "hardware" else _probe_software())
        except Exception as exc:  # a probe must answer, not crash the session
            reason = f"LBR probe failed: {exc}"
        _probed[key] = _with_doctor_line(Capability("lbr", not reason, reason), pmu)
    return _probed[key]


def _with_doctor_line(cap: Capability, pmu: str) -> Capability:
    """`cap` with what `pytest-lbr doctor` says of it: the CPU's LBR depth, and the fix."""
    here = running_machine()
    depth = here.lbr_caps
    detail = f"depth {depth}" if depth else "no LBR depth (no cpu/caps/branches)"
    if cap.available:
        detail += "; bpf_get_branch_snapshot() returns records"
    fix = (
        "LBR needs an Intel CPU with legacy LBR (or AMD LBRv2) on bare metal or KVM with "
        "lbr-fmt passthrough; elsewhere use --lbr-backend=graph"
        if here.name == "x86_64"
        else f"no {here.name} kernel gives bpf_get_branch_snapshot() branch records "
        "yet: the graph backend (--lbr-backend=graph, what auto picks) traces here"
    )
    check = "LBR" if pmu == "hardware" else f"LBR ({pmu} events)"
    return Capability(
        "lbr", cap.available, cap.reason, check=check, detail=detail, fix="" if cap else fix
    )


def _has_caps() -> bool:
    if os.geteuid() == 0:
        return True
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                return bool(eff >> _CAP_BPF & 1 and eff >> _CAP_PERFMON & 1)
    return False


def branch_events_problem(exc: OSError) -> str:
    """The probe's line for a failed perf_event_open of the LBR-enabling events."""
    if exc.errno == errno.ENOENT:
        return (
            "no PMU: perf_event_open(PERF_TYPE_HARDWARE, cycles, branch stack) failed "
            "with ENOENT (a VM without a virtual PMU?)"
        )
    if exc.errno == errno.EOPNOTSUPP:
        return "the PMU has no LBR: perf_event_open(branch stack) failed with EOPNOTSUPP"
    if exc.errno == errno.EBUSY:
        # x86 keeps LBR, BTS and Intel PT mutually exclusive (x86_add_exclusive()
        # in arch/x86/events/core.c): another user of one of them holds it.
        return (
            "the LBR is in use by another perf user or a hypervisor: perf_event_open(branch "
            "stack) failed with EBUSY (Intel PT or BTS tracing, e.g. perf record -e intel_pt//, "
            "or the hypervisor's own LBR use); stop that user and retry"
        )
    return f"perf_event_open(branch stack) failed: {exc}"


def _probe_hooks() -> str:
    """Why the tracer's hooks cannot load here ("" if they can): what every PMU needs."""
    from pytest_lbr.bpf.libbpf import BpfError, libbpf_version, libbpf_version_problem
    from pytest_lbr.capture.hooks import hook_set as hooks
    from pytest_lbr.capture.hooks.tracer_object import tracer_not_built, tracer_object

    if not _has_caps():
        return "not root and missing CAP_BPF+CAP_PERFMON"
    if not running_machine().btf:
        return f"no kernel BTF at {BTF_PATH} (CONFIG_DEBUG_INFO_BTF)"
    try:
        tracer_object()
    except FileNotFoundError as exc:
        return tracer_not_built(exc.filename)
    too_old = libbpf_version_problem(libbpf_version())
    if too_old:
        return too_old
    try:
        hooks.try_load_fexit()
    except (CaptureError, BpfError) as exc:
        if getattr(exc, "errno", None) == errno.EPERM or "EPERM" in str(exc):
            return "fentry/fexit programs refused with EPERM (kernel lockdown or no CAP_BPF)"
        return f"fexit tracer does not load: {exc}"
    return ""


def _probe_software() -> str:
    """Why software-clock perf events cannot be opened here ("" if they can)."""
    from pytest_lbr.kernel import perf

    try:
        perf.software_branch_events("any").close()
    except OSError as exc:
        return f"perf_event_open(PERF_TYPE_SOFTWARE, cpu-clock) failed: {exc}"
    return ""


def _probe() -> str:
    from pytest_lbr.capture.hooks.tracer_object import object_arch
    from pytest_lbr.kernel import perf

    try:
        events = perf.open_branch_events("any")
    except OSError as exc:
        problem = branch_events_problem(exc)
        arch = object_arch()
        if arch == "x86":
            return problem
        # Off x86 the kernel's helper is what decides (bpf_get_branch_snapshot() is
        # `return -ENOENT` unless CONFIG_X86, kernel/trace/bpf_trace.c since 5.16):
        # ask it, on software-clock events, so a kernel that gives arm64's branch
        # records (BRBE) to the helper is not refused here by its name.
        with perf.software_branch_events("any"):
            missing = _snapshot_problem()
        if missing:
            return f"this kernel has no branch snapshot for {arch}: {missing}; {problem}"
        return problem
    try:
        return _snapshot_problem()
    finally:
        events.close()


def _snapshot_problem() -> str:
    """Why bpf_get_branch_snapshot() gives no records at a tracepoint here ("" if it does)."""
    from pytest_lbr.bpf.libbpf import lib
    from pytest_lbr.capture.hooks import hook_set as hooks
    from pytest_lbr.targets import parse_target

    helper = lib.libbpf_probe_bpf_helper(_BPF_PROG_TYPE_KPROBE, _BPF_FUNC_get_branch_snapshot, None)
    if helper == 0:
        return "helper bpf_get_branch_snapshot missing (Linux >= 5.16 needed)"
    with hooks.HookSet([parse_target("tp:syscalls/sys_enter_getppid")], snapshot=True) as hs:
        os.getppid()
        hits = hs.drain()
    if not hits:
        return "the LBR self-test saw no hit (tracepoint syscalls/sys_enter_getppid)"
    bad = sorted(h.snapshot_ret for h in hits if h.snapshot_ret <= 0)
    if bad:
        name = errno.errorcode.get(-bad[0], str(bad[0]))
        return f"bpf_get_branch_snapshot() returned -{name}: the CPU gave no branch records"
    return ""


# -- capture ------------------------------------------------------------------------

#: What the LBR backend can do. Its hooks filter in the kernel (one process, the
#: processes it forks, a cgroup, or none) and say whether they ran in interrupt
#: context. Each hit is one ring-buffer record, complete when it arrives: it streams.
LBR_CAPABILITIES = Capabilities(
    scopes=frozenset({"process", "children", "system", "pid", "cgroup"}),
    live=True,
    retval=frozenset({"kfunc", "kfunc glob", "prog", "uretprobe"}),
    in_interrupt=True,
    branches=True,
    filters=True,
)

#: The same on software perf events (`--lbr-pmu=software`): every hit, no branches.
LBR_SOFTWARE_CAPABILITIES = dataclasses.replace(
    LBR_CAPABILITIES,
    branches=False,
    filters=False,
    missing=(("branches", NO_BRANCHES_NOTE),),
)


#: The modules a capture imports where it needs them, imported by `LbrBackend.prepare`
#: before the traced code runs: an import in the traced process can make directories
#: (pytest's assertion rewriting calls mkdir(2) for each plugin module it loads).
CAPTURE_MODULES = (
    "pytest_lbr.capture.hooks.hook_set",
    "pytest_lbr.capture.hooks.program_exits",
    "pytest_lbr.kernel.perf",
    "pytest_lbr.kernel.helpers",
    "pytest_lbr.programs.find",
    "pytest_lbr.programs.lines",
    "pytest_lbr.bytecode.flow",
    "pytest_lbr.bytecode.instructions",
    "pytest_lbr.symbols.disasm",
    "pytest_lbr.symbols.elf",
)


class LbrBackend:
    """The LBR backend for the registry (`pytest_lbr.capture.base.BackendDriver`):
    it keeps nothing set up between captures."""

    name: ClassVar[str] = "lbr"
    capabilities: ClassVar[Capabilities] = LBR_CAPABILITIES
    #: The PMU its captures run on (`PMUS`).
    pmu: ClassVar[str] = "hardware"

    @classmethod
    def probe(cls) -> Capability:
        """Whether LBR tracing works here (`probe_lbr`)."""
        return probe_lbr(cls.pmu)

    def prepare(self) -> None:
        """Import `CAPTURE_MODULES` before the traced code runs (nothing else to set
        up: hooks and perf events are made per capture, spare maps by the first)."""
        for module in CAPTURE_MODULES:
            importlib.import_module(module)

    def open(
        self,
        targets: Sequence[Target],
        *,
        scope: Scope,
        filter: str | None = None,
        live: bool = False,
    ) -> LbrCapture:
        """A not-yet-armed capture (`filter`: an LBR branch filter, "any" by default;
        `live`: read with `poll()`, so never of this process)."""
        if live and scope.is_this_process:
            raise CaptureError(LIVE_OWN_PROCESS)
        return LbrCapture(
            list(targets),
            filter=filter or "any",
            scope=scope,
            pmu=self.pmu,
            live=live,
            session=self,
        )

    def close(self) -> None:
        """Release the hooks the session kept on its programs (`program_exits`)."""
        from pytest_lbr.capture.hooks.program_exits import release_session_exits

        release_session_exits(self)


class LbrSoftwareBackend(LbrBackend):
    """The LBR backend on software perf events (`--lbr-pmu=software`): the same
    hooks, scopes and ring buffer, every hit recorded, no branch records. It proves
    a suite's targets, hooks and scopes on the LBR path where no CPU has LBR."""

    capabilities: ClassVar[Capabilities] = LBR_SOFTWARE_CAPABILITIES
    pmu: ClassVar[str] = "software"


class LbrCapture:
    """The `Capture` of the LBR backend (see `pytest_lbr.capture.Capture`)."""

    def __init__(
        self,
        targets: list[Target],
        filter: str = "any",
        *,
        check: bool = True,
        open_events: Callable[[str], Any] | None = None,
        scope: Scope | str | None = None,
        machine: Machine | None = None,
        pmu: str = "hardware",
        live: bool = False,
        session: object | None = None,
    ) -> None:
        self.targets = list(targets)
        #: Who keeps the fexit hooks on traced programs between traces (its
        #: backend, `program_exits.session_exits`); None: each trace its own.
        self._session = session
        #: Whose facts the trace carries (`Trace.arch`, the kernel release).
        self._machine = machine or running_machine()
        self.filter = filter
        self.scope = as_scope(scope)
        #: "software": no branch snapshot, software-clock perf events (`PMUS`; checked
        #: where it was chosen: `Tracer`, `LiveTrace`, `backend_class`).
        self.pmu = pmu
        #: Read while armed by this process: its own work (printing the hits) is
        #: never recorded, as the graph backend's live capture does.
        self.live = live
        #: A decoded hit's target -> the symbol of the function it hooked (a kernel
        #: function, a BPF program's kallsyms name); none for a tracepoint or
        #: uprobe. Trimming keeps the branches up to its last one.
        self._traced: dict[str, str] = {}
        #: After `stop()`: what the hook set said (it is closed then).
        self._lost = 0
        self._hook_notes: list[str] = []
        #: bpf_get_branch_snapshot()'s errors, one per hit it failed for.
        self._failed: list[int] = []
        #: program target -> what it returns (`implied.program_returns`), read at start
        self._returns: dict[str, tuple[int, bool] | None] = {}
        #: check=False skips probe_lbr() and `open_events` replaces the branch
        #: events: lets a guest without a PMU run the whole path on real hooks.
        self._check = check
        self._open_events = open_events
        self._events: object | None = None
        self._hooks: HookSet | ProgramExits | None = None

    def start(self) -> None:
        """Check the capability, open the perf events, attach the tracer everywhere."""
        from pytest_lbr.capture.hooks import hook_set as hooks
        from pytest_lbr.kernel import perf

        cap = probe_lbr(self.pmu) if self._check else Capability("lbr", True)
        if not cap.available:
            raise CaptureError(f"lbr backend unavailable: {cap.reason}")
        software = self.pmu == "software"
        default_events = perf.software_branch_events if software else perf.open_branch_events
        self._returns = _program_returns(self.targets)
        try:
            self._events = (self._open_events or default_events)(self.filter)
            tgid = 0 if self.scope.kind == "system" else self.scope.pid
            from pytest_lbr.capture.hooks.program_exits import session_exits

            session = session_exits(self._session) if self._session is not None else None
            if session is not None and self._keeps_hooks():
                self._hooks = session.take(
                    self.targets, tgid, snapshot=not software, interrupts=self.scope.interrupts
                )
                return
            hs = hooks.HookSet(
                self.targets,
                snapshot=not software,
                tgid=tgid,
                children=self.scope.kind == "children",
                cgroup=self.scope.cgroup,
                interrupts=self.scope.interrupts,
                skip_tgid=os.getpid() if self.live else 0,
                maps=session.maps if session is not None else None,
            )
            self._hooks = hs
            hs.attach()
        except BaseException:
            self.close()
            raise

    def stop(self) -> Trace:
        """Collect every hit not handed over yet, release the kernel objects, decode
        into a `Trace`.

        Raw: branches between bare addresses, the tracer's own included
        (`branches` and `raw_branches` alike); `pytest_lbr.tracer` symbolizes
        them and `trim` trims `branches`.
        """
        hs = self._armed("stop")
        raw = hs.drain()
        self._lost = hs.lost
        self._hook_notes = list(hs.notes)
        attached = list(hs.attached)
        self.close()
        self._failed += [h.snapshot_ret for h in raw if h.snapshot_ret < 0]
        trace, traced = decode_trace(
            self.targets, raw, attached, self._machine, lost=self._lost, notes=self.notes
        )
        self._traced.update(traced)
        trace.notes.extend(typed_returns(trace.hits, self._returns))
        if self.pmu == "software":
            trace.no_branches = NO_BRANCHES_NOTE.removeprefix("no branches: ")
        return trace

    def poll(self) -> list[Hit]:
        """The hits recorded since the last poll, oldest first (while armed).

        Each hit is one record of the hook set's ring buffer, written whole when
        the hook ran (an exit hook's at the return): every record read is a
        complete hit, handed over once.
        """
        hs = self._armed("poll")
        raw = hs.drain()
        self._failed += [h.snapshot_ret for h in raw if h.snapshot_ret < 0]
        trace, traced = decode_trace(self.targets, raw, list(hs.attached), self._machine)
        self._traced.update(traced)
        typed_returns(trace.hits, self._returns)  # its note comes with stop()'s trace
        return trace.hits

    def _keeps_hooks(self) -> bool:
        """Whether this trace's hooks come from its session's kept ones: programs
        only (their hooks are fexit, fixed to one program), traced in one process
        or the whole system, not live (`program_exits`)."""
        return (
            self._session is not None
            and not self.live
            and all(t.is_program for t in self.targets)
            and self.scope.kind in ("process", "system")
            and self.scope.cgroup is None
        )

    def _armed(self, what: str) -> HookSet | ProgramExits:
        hs = self._hooks
        if hs is None:
            raise CaptureError(f"LbrCapture.{what}() without a successful start()")
        return hs

    @property
    def lost(self) -> int:
        """Records the ring buffer dropped (so far while armed, all after `stop()`)."""
        hs = self._hooks
        return hs.lost if hs is not None else self._lost

    @property
    def notes(self) -> list[str]:
        """Why the hits may be incomplete: what the hook set could not attach, hits
        without branch records."""
        hs = self._hooks
        notes = list(hs.notes) if hs is not None else list(self._hook_notes)
        if self.pmu == "software":
            notes.insert(0, NO_BRANCHES_NOTE)
        if self._failed:
            notes.append(f"LBR: snapshot failed on {len(self._failed)} hits ({self._failed[0]})")
        return notes

    def trim(self, hits: list[Hit]) -> None:
        """Drop the tracer's own newest records from the named hits' branches: up to
        the newest branch touching the function each hook traced."""
        trim_tracer_hits(hits, self._traced)

    def close(self) -> None:
        """Release the tracer and the perf events (idempotent)."""
        for attr in ("_hooks", "_events"):
            obj = getattr(self, attr)
            setattr(self, attr, None)
            if obj is not None:
                obj.close()  # type: ignore[attr-defined]


def _program_returns(targets: Sequence[Target]) -> dict[str, tuple[int, bool] | None]:
    """What each program target returns, as its BTF says (read while it is loaded)."""
    from pytest_lbr.programs.find import resolve_program

    returns: dict[str, tuple[int, bool] | None] = {}
    for t in targets:
        if t.is_program:
            try:
                with resolve_program(t) as ref:
                    returns[t.spec] = program_returns(ref.fd)
            except (TargetError, CaptureError):
                returns[t.spec] = None  # attaching says why, in its own words
    return returns


if TYPE_CHECKING:  # mypy checks the backend keeps to the protocols
    _driver: type[BackendDriver] = LbrBackend
    _software: type[BackendDriver] = LbrSoftwareBackend
    _capture: type[Capture] = LbrCapture
