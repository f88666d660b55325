"""Capture engine: arm a backend on resolved targets, collect a `Trace`.

Every backend implements the protocols of `pytest_lbr.capture.base` (a
`BackendDriver` class that opens `Capture`s) and is named once, in `REGISTRY`:

* ``lbr``   -- a BPF program at each target calls bpf_get_branch_snapshot() first
  thing and ships the records through a ring buffer (`pytest_lbr.capture.lbr.backend`);
* ``graph`` -- the software call trace for machines without LBR
  (`pytest_lbr.capture.graph.backend`).

Adding a backend is a module with its driver class and one line in `REGISTRY`;
nothing else picks a backend by its name. `resolve_backend` probes a backend once
and gives the `Backend` the tracer opens every capture through: it keeps what a
backend sets up once per session (the graph backend's function tracer) until it
is closed.

Besides the registry (here) and the protocols (`base.py`), what the backends share:
`hooks/` (the LBR tracer's BPF hooks, which both attach), `kinds/` (the kinds of
target, one module each: how each is hooked, armed and its hits cut), `call_sites.py` (where a
function calls another, read from live code), `implied.py` (calls of a BPF program the
function tracer cannot record, proven by its code), `trim.py` (the tracer's own
records trimmed off a hit's branches: the LBR backend's and the selftest's) and
`helper_table.py` (each BPF helper and how each backend sees its calls: `pytest-lbr
doctor --helpers`). Tested by tests/test_capture_protocol.py, test_scope_args.py,
test_helper_table.py, test_lbr_decode.py (trim),
test_graph_narrow.py (call sites), tests/bytecode/test_flow.py (implied calls) and,
in the guests, by tests/kernel/.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from pytest_lbr.capture.base import (
    FILTERS,
    SCOPES,
    BackendDriver,
    Capabilities,
    Capability,
    Capture,
    CaptureError,
    Scope,
    as_scope,
)
from pytest_lbr.model import Hit, Trace
from pytest_lbr.names import BackendName, PmuName, parse_name
from pytest_lbr.targets import Target

__all__ = [
    "BACKENDS",
    "FILTERS",
    "PMUS",
    "PMU_REGISTRY",
    "REGISTRY",
    "SCOPES",
    "Scope",
    "Backend",
    "BackendDriver",
    "Capabilities",
    "Capability",
    "Capture",
    "CaptureError",
    "auto_choice",
    "backend_class",
    "open_capture",
    "probe",
    "resolve_backend",
]

#: Every backend: its name -> "module:class" of its `BackendDriver`, in the order
#: "auto" prefers them. Imported only when a backend is used. Its names are
#: `BackendName`'s, "auto" aside, in the same order (tests/test_names.py checks).
REGISTRY: dict[str, str] = {
    "lbr": "pytest_lbr.capture.lbr.backend:LbrBackend",
    "graph": "pytest_lbr.capture.graph.backend:GraphBackend",
}

#: Backends that also run on a PMU other than the CPU's ("hardware", the default):
#: (name, PMU) -> "module:class" of that variant's driver (`--lbr-pmu`).
PMU_REGISTRY: dict[tuple[str, str], str] = {
    ("lbr", "software"): "pytest_lbr.capture.lbr.backend:LbrSoftwareBackend",
}

#: Backend names a user can ask for: "auto", then `REGISTRY`'s (`BackendName`).
BACKENDS = tuple(BackendName)
#: PMUs a user can ask for (`--lbr-pmu`, `PmuName`): "hardware", and `PMU_REGISTRY`'s.
PMUS = tuple(PmuName)


def backend_class(name: str, pmu: str = "hardware") -> type[BackendDriver]:
    """The driver class of backend `name` (a `REGISTRY` name) on `pmu` (ValueError
    naming the known ones otherwise)."""
    pmu = parse_name(PmuName, pmu)
    name = parse_name(BackendName, name)
    try:
        where = REGISTRY[name] if pmu == "hardware" else PMU_REGISTRY[(name, pmu)]
    except KeyError:
        if name not in REGISTRY:
            raise ValueError(
                "backend 'auto' has no driver of its own: resolve it first (resolve_backend)"
            ) from None
        takes = sorted({n for n, p in PMU_REGISTRY if p == pmu})
        raise ValueError(
            f"the {name} backend does not run on --lbr-pmu={pmu} "
            f"(only {', '.join(takes)} does): drop --lbr-pmu or pick that backend"
        ) from None
    module, _, cls = where.partition(":")
    found: type[BackendDriver] = getattr(importlib.import_module(module), cls)
    return found


def _runs_on(name: str, pmu: str) -> bool:
    return pmu == "hardware" or (name, pmu) in PMU_REGISTRY


def probe(backend: str, pmu: str = "hardware") -> Capability:
    """Probe one concrete backend (a `REGISTRY` name) on `pmu`; never raises."""
    try:
        cls = backend_class(backend, pmu)
    except ValueError as exc:
        return Capability(str(backend), False, str(exc))
    return cls.probe()


def resolve_backend(wanted: str, *, live: bool = False, pmu: str = "hardware") -> Backend:
    """Probe `wanted` ("auto" or a `REGISTRY` name) once; "auto" takes the first
    backend of `REGISTRY` that works here (LBR where the CPU has it, else the graph
    backend), and with `live` only backends that stream; with a `pmu` other than
    "hardware" only backends that run on it. Never raises: an unusable backend
    says why."""
    if wanted != "auto":
        return Backend(probe(wanted, pmu), wanted, pmu)
    names = [
        n
        for n in REGISTRY
        if _runs_on(n, pmu) and (not live or backend_class(n, pmu).capabilities.live)
    ]
    refused: list[Capability] = []
    for name in names:
        cap = probe(name, pmu)
        if cap.available:
            return Backend(cap, wanted, pmu)
        refused.append(cap)
    # None works: the last one's reason, and why the others did not either.
    last = refused[-1]
    for other in refused[:-1]:
        last.reason = f"{last.reason} (and no {other.backend.upper()}: {other.reason})"
    return Backend(last, wanted, pmu)


def auto_choice(*, live: bool = False, pmu: str = "hardware") -> str | None:
    """The backend "auto" picks where that is known without probing (one candidate
    left; with `live`, of the backends that stream; on `pmu`), else None."""
    names = [
        n
        for n in REGISTRY
        if _runs_on(n, pmu) and (not live or backend_class(n, pmu).capabilities.live)
    ]
    return names[0] if len(names) == 1 else None


class Backend:
    """A probed backend and what it keeps set up between traces.

    The graph backend turns the function tracer on at its first capture and
    keeps it on (recording nothing between captures) until `close()`, so a
    session pays for that once; LBR keeps nothing. Captures opened here share it.
    """

    def __init__(
        self, capability: Capability, requested: str | None = None, pmu: str = "hardware"
    ) -> None:
        self.capability = capability
        #: The name it was resolved from ("auto" or the backend's own).
        self.requested = requested or capability.backend
        #: The PMU its captures run on (`PMUS`).
        self.pmu = pmu
        self._driver: BackendDriver | None = None

    @property
    def name(self) -> str:
        """The backend's `REGISTRY` name (or the unknown name asked for)."""
        return self.capability.backend

    @property
    def capabilities(self) -> Capabilities:
        """What the backend can do (known without arming it)."""
        return backend_class(self.name, self.pmu).capabilities

    def prepare(self) -> None:
        """Set up what the backend keeps between captures now, before the traced code
        runs (`BackendDriver.prepare`); nothing where it is unavailable (idempotent)."""
        if self.capability.available:
            self._ensure_driver().prepare()

    def open(
        self,
        targets: Sequence[Target],
        *,
        filter: str | None = None,
        scope: Scope | str | None = None,
        live: bool = False,
    ) -> Capture:
        """A not-yet-armed capture of `targets` (`scope`: whose work; this process by
        default; `live`: read with `poll()` while armed)."""
        if not self.capability.available:
            raise CaptureError(f"{self.name} backend unavailable: {self.capability.reason}")
        driver = self._ensure_driver()
        return driver.open(list(targets), scope=as_scope(scope), filter=filter, live=live)

    def _ensure_driver(self) -> BackendDriver:
        if self._driver is None:
            self._driver = backend_class(self.name, self.pmu)()
        return self._driver

    def close(self) -> None:
        """Release what the backend kept set up (idempotent; captures must be closed)."""
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.close()

    def __repr__(self) -> str:
        return f"<Backend {self.capability!r}>"


def open_capture(
    backend: str,
    targets: Sequence[Target],
    *,
    filter: str | None = None,
    scope: Scope | str | None = None,
    pmu: str = "hardware",
) -> Capture:
    """A not-yet-armed capture of `targets` on a concrete backend (a `REGISTRY` name)
    and `pmu`, set up for this capture alone (`Backend.open` shares the set-up between
    captures): its `close()` releases that set-up too."""
    driver = backend_class(backend, pmu)()
    try:
        capture = driver.open(list(targets), scope=as_scope(scope), filter=filter)
    except BaseException:
        driver.close()
        raise
    return _Alone(capture, driver)


class _Alone:
    """A capture that owns its driver: closing it closes both."""

    def __init__(self, capture: Capture, driver: BackendDriver) -> None:
        self._capture, self._driver = capture, driver

    def start(self) -> None:
        self._capture.start()

    def poll(self) -> list[Hit]:
        return self._capture.poll()

    def stop(self) -> Trace:
        return self._capture.stop()

    def close(self) -> None:
        try:
            self._capture.close()
        finally:
            self._driver.close()

    @property
    def lost(self) -> int:
        return self._capture.lost

    @property
    def notes(self) -> list[str]:
        return self._capture.notes

    def trim(self, hits: list[Hit]) -> None:
        self._capture.trim(hits)
