"""Shared set-up of the conformance suite: BPF C written the way BPF authors write it
today (vmlinux.h, CO-RE, libbpf's SEC() names and macros), attached for real.

Every test is marked `kernel` (as examples/conftest.py does): it needs root and a
tracing kernel, so on a laptop it is skipped with the reason and in a `pytest-lbr vm`
guest a skip is a failure. The objects are built by `make -C tests/conformance`
(ci/setup runs it).

Every test marked with a program type runs twice: with the session's tracer
(`[session]`: the backend the run chose, graph in CI's guests) and with the lbr
backend on software perf events (`[lbr-software]`: the LBR path, hooks and the
programs that read the snapshot, on a machine without LBR: hits and return values,
no branches). docs/guide.md's table has a column for each.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr.capture.base import CaptureError
from pytest_lbr.model import Trace
from pytest_lbr.tracer import Tracer

CONFORMANCE = Path(__file__).resolve().parent
#: The tracers a typed test runs with: the session's, and the lbr backend on software
#: perf events (`Tracer(backend="lbr", pmu="software")`).
SESSION, LBR_SOFTWARE = "session", "lbr-software"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "program_type(name): the BPF program type a conformance test covers; it goes "
        "into the results records (`properties`), where docs/guide.md's table is made from",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(CONFORMANCE):
            item.add_marker(pytest.mark.kernel)
        # A user property, as record_property makes, without its junit xunit2 warning.
        for mark in item.iter_markers("program_type"):
            item.user_properties.append(("program_type", str(mark.args[0])))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lbr" in metafunc.fixturenames and metafunc.definition.get_closest_marker("program_type"):
        metafunc.parametrize("tracer_kind", [SESSION, LBR_SOFTWARE], indirect=True)


@pytest.fixture
def tracer_kind(request: pytest.FixtureRequest) -> str:
    """Which tracer the test's `lbr` is (`SESSION` unless the test is typed)."""
    return str(getattr(request, "param", SESSION))


#: What a kernel's verifier says when it refuses the LBR path's fentry/fexit hook on a
#: program that is itself a tracing program (seen in the 6.1 guest; 6.12 takes it).
RECURSIVE_ATTACH = "Cannot recursively attach"


class LbrPath(Tracer):
    """The lbr backend on software perf events, where a kernel that refuses its hook on a
    program type is an allowed skip in the kernel's words (never a silent pass)."""

    @contextmanager
    def trace(self, *targets: Any, **kwargs: Any) -> Iterator[Trace]:
        with ExitStack() as stack:
            try:
                trace = stack.enter_context(super().trace(*targets, **kwargs))
            except CaptureError as exc:
                if RECURSIVE_ATTACH not in str(exc):
                    raise
                pytest.skip(f"{os.uname().release}: {exc}")
            yield trace


@pytest.fixture(scope="session")
def software_lbr() -> Iterator[Tracer]:
    """One lbr-on-software-events tracer for the session: its backend is set up once."""
    tracer = LbrPath(backend="lbr", pmu="software")
    if tracer.available:
        tracer.prepare()  # not in a test's first trace: its programs count this process
    try:
        yield tracer
    finally:
        tracer.close()


@pytest.fixture
def lbr(lbr: Tracer, tracer_kind: str, request: pytest.FixtureRequest) -> Iterator[Tracer]:
    """The plugin's `lbr`, or for `[lbr-software]` the software-events tracer, whose
    traces go into the same results record (the plugin reads `lbr.traces`)."""
    if tracer_kind == SESSION:
        yield lbr
        return
    tracer: Tracer = request.getfixturevalue("software_lbr")
    if not tracer.available:
        pytest.fail(f"lbr backend on software perf events: {tracer.reason}", pytrace=False)
    tracer.scope, tracer.traces, tracer.written = lbr.scope, lbr.traces, lbr.written
    request.node.add_marker(pytest.mark.allow_skip)  # only LbrPath's refusals skip
    yield tracer


@pytest.fixture
def built() -> Callable[[str], Path]:
    """`built("exec_tp")` -> tests/conformance/build/exec_tp.bpf.o; skips if it was not built."""

    def path(name: str) -> Path:
        obj = CONFORMANCE / "build" / f"{name}.bpf.o"
        if not obj.exists():
            pytest.skip(f"{obj} not built: run `make -C tests/conformance`")
        return obj

    return path
