"""pytest glue: the tracing options, the `lbr` marker, fixtures and hooks.

Each hook hands off to the `LbrSession` in `config.stash` (`session.py`). Golden traces
(`golden.py`), the kernel-splat watch (`splats.py`), the results file
(`results_writer.py`) and coverage (`coverage.py`) are pytest plugins of their own, with
their own options and hooks, listed in `pytest_plugins`; what they share per test and
per session is in `shared.py`. Nothing heavy is imported here, so without `--lbr` the
plugin costs nothing. Tested by tests/test_plugin.py, test_guest_mode.py,
test_kmsg.py (splats), test_results.py, test_golden*.py, test_coverage.py, and in the
guests by tests/kernel/.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr import guest_mode
from pytest_lbr.errors import BCC_MISSING, bcc_import_failed, one_line
from pytest_lbr.names import BackendName, LbrFilter, PmuName, ScopeKind, choices
from pytest_lbr.plugin.session import SESSION_KEY, LbrSession
from pytest_lbr.plugin.shared import option_group, written_of

if TYPE_CHECKING:  # for IDEs and type checkers: the fixtures' types, imported on use
    from pytest_lbr.bpf import BpfLoader, VethPair
    from pytest_lbr.tracer import Tracer

__all__ = ["bpf", "lbr", "lbr_golden", "veth"]

# Plugins of their own (options, hooks), registered with this one.
pytest_plugins = [
    "pytest_lbr.plugin.golden",
    "pytest_lbr.plugin.splats",
    "pytest_lbr.plugin.results_writer",
    "pytest_lbr.plugin.coverage",
]

_OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    # (flag, argparse kwargs, ini type)
    (
        "--lbr",
        {
            "action": "store_true",
            "help": "enable branch tracing; without it, tests that need tracing are skipped",
        },
        "bool",
    ),
    (
        "--lbr-backend",
        {
            "choices": choices(BackendName),
            "help": "auto (hardware LBR where the CPU has "
            "it, else graph), lbr or graph (default: auto)",
        },
        "string",
    ),
    (
        "--lbr-pmu",
        {
            "choices": choices(PmuName),
            "help": "what the lbr backend runs on: hardware (the CPU's LBR, default) or "
            "software (software perf events: every hit, no branches; proves targets, hooks "
            "and scopes on the LBR path where no CPU has LBR)",
        },
        "string",
    ),
    (
        "--lbr-require",
        {"action": "store_true", "help": "tracing unavailable -> error, not skip"},
        "bool",
    ),
    (
        "--lbr-filter",
        {"choices": choices(LbrFilter), "help": "LBR branch filter (LBR only)"},
        "string",
    ),
    (
        "--lbr-vmlinux",
        {"metavar": "PATH", "help": "debug vmlinux for file:line (default: auto-discovered)"},
        "string",
    ),
    (
        "--lbr-report",
        {
            "metavar": "DIR",
            "help": "write every traced test's trace (text) and one HTML page to DIR",
        },
        "string",
    ),
    (
        "--lbr-edges",
        {
            "action": "store_true",
            "help": "report text files hold branch records (src -> dst), not call trees",
        },
        "bool",
    ),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    for flag, kwargs, ini_type in _OPTIONS:
        dest = flag.lstrip("-").replace("-", "_")
        group.addoption(flag, dest=dest, default=None, **kwargs)
        parser.addini(dest, f"default for {flag}", type=ini_type)  # type: ignore[arg-type]
    group.addoption(
        "--lbr-run-kernel-tests",
        dest="lbr_run_kernel_tests",
        action="store_true",
        help="run tests marked kernel on this machine, not only in pytest-lbr vm guests",
    )
    group.addoption(
        "--lbr-shard",
        dest="lbr_shard",
        metavar="I/N",
        help="run only shard I of N of the collected tests (a CI matrix of N runners)",
    )
    parser.addini(
        "lbr_strict",
        "inside a pytest-lbr vm guest, a skipped kernel test fails unless marked allow_skip",
        type="bool",
        default=True,
    )
    parser.addini(
        "lbr_scope",
        f"whose work traces record by default: {', '.join(choices(ScopeKind))} "
        "(lbr.trace(scope=...) and @pytest.mark.lbr(scope=...) choose per trace)",
        default=ScopeKind.PROCESS.value,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "lbr(*targets, golden=False, level='function', exclude=(), keep=(), collapse=True, "
        "sort_hits=False, scope='process', pid=None, cgroup=None): trace targets for the whole test body; golden=True compares with "
        "the golden trace afterwards",
    )
    config.addinivalue_line("markers", guest_mode.KERNEL_MARKER)
    config.addinivalue_line("markers", guest_mode.ALLOW_SKIP_MARKER)
    session = config.stash[SESSION_KEY] = LbrSession(config)
    if session.enabled and not session.is_worker:
        _check_install()
    # Registered as a plugin too, for pytest_runtest_logreport (which gets no config and
    # runs on the xdist controller for every worker's reports).
    config.pluginmanager.register(session, "lbr-session")


def _check_install() -> None:
    """Stop a tracing session whose install lacks the tracer object, in one line."""
    from pytest_lbr.capture.hooks.tracer_object import install_problem

    problem = install_problem()
    if problem:
        raise pytest.UsageError(f"pytest-lbr cannot trace fully: {problem}")


def _session(config: pytest.Config) -> LbrSession:
    return config.stash[SESSION_KEY]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    guest_mode.select(config, items)
    _session(config).add_marker_fixture(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _session(item.config).marked_body(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _session(item.config).on_report(item, call, report)
    if call.excinfo is not None and report.failed and not isinstance(report.longrepr, str):
        report.longrepr = one_line(call.excinfo, item.path) or report.longrepr
    guest_mode.enforce_strict(item, report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.failed and bcc_import_failed(str(report.longrepr)):
        report.longrepr = f"{collector.nodeid}: cannot import bcc: {BCC_MISSING}"
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    _session(session.config).finish(session)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    _session(config).summary(terminalreporter)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION_KEY in config.stash:  # not if pytest_configure failed before creating it
        _session(config).unconfigure()


@pytest.fixture
def lbr(request: pytest.FixtureRequest) -> Generator[Tracer, None, None]:
    """The `Tracer`: `with lbr.trace(*targets) as trace: ...`, `lbr.check_golden(trace)`.

    Skipped without --lbr ("tracing disabled: run with --lbr") and when the backend
    cannot run here (the reason; an error with --lbr-require). Under
    `@pytest.mark.lbr(targets...)` the whole-body trace is `lbr.traces[0]`.
    """
    yield from _session(request.config).lbr_fixture(request)


@pytest.fixture
def bpf(request: pytest.FixtureRequest) -> Generator[BpfLoader, None, None]:
    """A `BpfLoader`: `bpf.load(path) -> BpfObject`; everything loaded is closed at teardown.

    A relative path is found beside the test module first, then in the working directory.
    """
    from pytest_lbr.bpf import BpfLoader  # type: ignore[import-not-found,unused-ignore]
    from pytest_lbr.plugin.coverage import load_hook

    # Its book is the test's: the `lbr` fixture's tracer reads it (`written_of`).
    loader = BpfLoader(
        request.path.parent,
        after_load=load_hook(request.config),
        written=written_of(request.node),
    )
    try:
        yield loader
    finally:
        loader.close()


@pytest.fixture
def veth() -> Generator[VethPair, None, None]:
    """A `VethPair` for this test: `veth.host` (this namespace) and `veth.peer` (eth0 in
    the new namespace `veth.netns`), up, with IPv4 addresses; both ends, the namespace
    and everything attached to them are removed at teardown, also when the test fails.
    Needs root and iproute2's `ip`.
    """
    from pytest_lbr.bpf.netns import VethPair  # type: ignore[import-not-found,unused-ignore]

    with VethPair.create() as pair:
        yield pair


@pytest.fixture
def lbr_golden(request: pytest.FixtureRequest) -> Generator[Callable[..., None], None, None]:
    """`lbr_golden(trace, name=None, level="function")`: the golden check of `lbr.check_golden`
    for traces from elsewhere (a saved trace, the CLI); needs no tracing, so no --lbr."""
    yield from _session(request.config).golden_fixture(request)
