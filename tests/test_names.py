"""The option vocabularies (pytest_lbr/names.py): each is named once, parsed by one
function with one line of error, and every place that takes a choice takes it from
there: the plugin's options, `pytest-lbr trace`, the tracer, live traces, scopes,
golden levels and the capture registry."""

from __future__ import annotations

import ast
import enum
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_lbr import capture, golden, plugin
from pytest_lbr.capture import PMU_REGISTRY, REGISTRY, Scope, backend_class
from pytest_lbr.capture.lbr.backend import PMUS as LBR_PMUS
from pytest_lbr.cli import build_parser, main
from pytest_lbr.golden import normalize
from pytest_lbr.kernel.perf import BRANCH_FILTERS
from pytest_lbr.live import LiveTrace
from pytest_lbr.model import Trace
from pytest_lbr.names import (
    BackendName,
    ColorWhen,
    CoverageFormat,
    GoldenLevel,
    LbrFilter,
    PmuName,
    ScopeKind,
    SplatMode,
    choices,
    parse_name,
)
from pytest_lbr.tracer import Tracer

NAMES = Path(__file__).resolve().parents[1] / "pytest_lbr" / "names.py"

#: Each vocabulary, its words in order, and the one line an unknown word gets.
VOCABULARIES: list[tuple[type[enum.StrEnum], tuple[str, ...], str]] = [
    (
        BackendName,
        ("auto", "lbr", "graph"),
        "unknown backend 'x'; expected one of auto, lbr, graph",
    ),
    (PmuName, ("hardware", "software"), "unknown PMU 'x'; expected one of hardware, software"),
    (
        LbrFilter,
        ("any", "any_call", "any_return", "call", "ind_call", "cond", "call_stack", "ind_jump"),
        "unknown LBR filter 'x'; expected one of any, any_call, any_return, call, ind_call, "
        "cond, call_stack, ind_jump",
    ),
    (
        ScopeKind,
        ("process", "children", "system"),
        "unknown scope 'x'; expected one of process, children, system",
    ),
    (
        GoldenLevel,
        ("function", "symbol", "line"),
        "unknown golden level 'x'; expected one of function, symbol, line",
    ),
    (SplatMode, ("fail", "off"), "unknown kernel-splat mode 'x'; expected one of fail, off"),
    (
        CoverageFormat,
        ("lcov", "cobertura"),
        "unknown coverage report format 'x'; expected one of lcov, cobertura",
    ),
]
IDS = [kind.__name__ for kind, _, _ in VOCABULARIES]


# -- the vocabularies and parse_name ------------------------------------------------


@pytest.mark.parametrize("kind, words, _message", VOCABULARIES, ids=IDS)
def test_each_word_parses_to_its_member(
    kind: type[enum.StrEnum], words: tuple[str, ...], _message: str
) -> None:
    assert choices(kind) == words
    assert all(type(word) is str for word in choices(kind))
    for word, member in zip(words, kind, strict=True):
        assert parse_name(kind, word) is member
        assert parse_name(kind, member) is member
        assert member == word and f"{member}" == word and str(member) == word
    assert kind.__doc__ and not kind.__doc__.startswith("An enumeration")


@pytest.mark.parametrize("kind, _words, message", VOCABULARIES, ids=IDS)
@pytest.mark.parametrize("typed", ["x", "X"], ids=["unknown", "other-case"])
def test_an_unknown_word_is_one_line_naming_the_accepted_ones(
    kind: type[enum.StrEnum], _words: tuple[str, ...], message: str, typed: str
) -> None:
    with pytest.raises(ValueError) as err:
        parse_name(kind, typed)
    assert str(err.value) == message.replace("'x'", repr(typed), 1)
    assert "\n" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.parametrize("odd", ["", " lbr", "lbr ", "LBR", "Graph"])
def test_near_misses_are_refused_not_guessed(odd: str) -> None:
    with pytest.raises(ValueError, match=r"^unknown backend "):
        parse_name(BackendName, odd)


def test_names_imports_only_the_standard_library() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(NAMES.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").partition(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
    code = (
        "import sys, pytest_lbr.names; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_lbr')))"
    )
    loaded = subprocess.check_output([sys.executable, "-c", code], text=True).strip()
    assert loaded == "['pytest_lbr', 'pytest_lbr.names']"


# -- the tuples other modules export are the vocabularies -----------------------------


def test_exported_tuples_are_the_vocabularies_in_order() -> None:
    assert capture.BACKENDS == tuple(BackendName)
    assert capture.PMUS == tuple(PmuName) == LBR_PMUS
    assert capture.FILTERS == tuple(LbrFilter)
    assert capture.SCOPES == tuple(ScopeKind)
    assert golden.LEVELS == tuple(GoldenLevel)


def test_the_registry_holds_exactly_the_backend_names_but_auto() -> None:
    # capture.BACKENDS is "auto", then REGISTRY's names: in the order "auto" prefers them.
    assert list(REGISTRY) == [m.value for m in BackendName if m != BackendName.AUTO]
    assert BackendName.AUTO not in REGISTRY
    assert {pmu for _, pmu in PMU_REGISTRY} | {"hardware"} == set(PmuName)
    assert {name for name, _ in PMU_REGISTRY} <= set(REGISTRY)


def test_the_kernel_layer_maps_every_lbr_filter() -> None:
    assert set(BRANCH_FILTERS) == set(LbrFilter)


# -- where input arrives ----------------------------------------------------------------


def _message(kind: type[enum.StrEnum], typed: str) -> str:
    message = next(m for k, _, m in VOCABULARIES if k is kind)
    return message.replace("'x'", repr(typed), 1)


@pytest.mark.parametrize(
    "kwargs, kind, typed",
    [
        ({"backend": "pt"}, BackendName, "pt"),
        ({"pmu": "fpga"}, PmuName, "fpga"),
        ({"filter": "everything"}, LbrFilter, "everything"),
        ({"scope": "everyone"}, ScopeKind, "everyone"),
    ],
)
def test_the_tracer_checks_its_arguments_when_built(
    kwargs: dict[str, Any], kind: type[enum.StrEnum], typed: str
) -> None:
    with pytest.raises(ValueError) as err:
        Tracer(**kwargs)
    assert str(err.value) == _message(kind, typed)


@pytest.mark.parametrize(
    "kwargs, kind, typed",
    [
        ({"backend": "pt"}, BackendName, "pt"),
        ({"filter": "everything"}, LbrFilter, "everything"),
        ({"scope": "everyone"}, ScopeKind, "everyone"),
    ],
)
def test_a_trace_checks_its_arguments_before_arming(
    kwargs: dict[str, Any], kind: type[enum.StrEnum], typed: str
) -> None:
    with Tracer() as tracer, pytest.raises(ValueError) as err:
        with tracer.trace("kfunc:vfs_write", **kwargs):
            pass
    assert str(err.value) == _message(kind, typed)
    assert tracer.traces == []


def test_the_tracer_keeps_members() -> None:
    with Tracer("graph", filter="call", scope="children", pmu="hardware") as tracer:
        assert tracer.scope is ScopeKind.CHILDREN
        assert tracer.pmu is PmuName.HARDWARE


@pytest.mark.parametrize(
    "kwargs, kind, typed",
    [
        ({"backend": "pt"}, BackendName, "pt"),
        ({"pmu": "fpga"}, PmuName, "fpga"),
        ({"filter": "everything"}, LbrFilter, "everything"),
    ],
)
def test_a_live_trace_checks_its_arguments(
    kwargs: dict[str, Any], kind: type[enum.StrEnum], typed: str
) -> None:
    with pytest.raises(ValueError) as err:
        LiveTrace(["kfunc:vfs_write"], **kwargs)
    assert str(err.value) == _message(kind, typed)


def test_scopes_golden_levels_and_the_registry_check_with_the_same_line() -> None:
    with pytest.raises(ValueError) as err:
        Scope.of("everyone")
    assert str(err.value) == _message(ScopeKind, "everyone")
    assert Scope.of("system").kind is ScopeKind.SYSTEM
    assert type(str(Scope.of("system"))) is str
    with pytest.raises(ValueError) as err:
        normalize(Trace(), level="insn")
    assert str(err.value) == _message(GoldenLevel, "insn")
    with pytest.raises(ValueError) as err:
        backend_class("fast")
    assert str(err.value) == _message(BackendName, "fast")
    with pytest.raises(ValueError) as err:
        backend_class("lbr", "fpga")
    assert str(err.value) == _message(PmuName, "fpga")
    cap = capture.probe("fast")
    assert not cap.available and cap.reason == _message(BackendName, "fast")
    assert type(capture.probe(BackendName.GRAPH, "software").backend) is str


# -- option choices come from the vocabularies -------------------------------------------


class _Recorder:
    """Stands in for pytest's parser: what `pytest_addoption` registers."""

    def __init__(self) -> None:
        self.options: dict[str, dict[str, Any]] = {}

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        for flag in flags:
            self.options[flag] = kwargs

    def addini(self, name: str, help: str, type: str | None = None, default: Any = None) -> None:
        pass


PLUGIN_CHOICES = {
    "--lbr-backend": BackendName,
    "--lbr-pmu": PmuName,
    "--lbr-filter": LbrFilter,
    "--lbr-kernel-splats": SplatMode,
}
CLI_CHOICES = {
    "--backend": BackendName,
    "--pmu": PmuName,
    "--filter": LbrFilter,
    "--color": ColorWhen,
}


def test_the_plugins_option_choices_come_from_the_vocabularies() -> None:
    parser = _Recorder()
    plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    for name in plugin.pytest_plugins:  # the plugins it registers (golden, splats...)
        importlib.import_module(name).pytest_addoption(parser)
    with_choices = {flag for flag, kw in parser.options.items() if "choices" in kw}
    assert with_choices == set(PLUGIN_CHOICES)
    for flag, kind in PLUGIN_CHOICES.items():
        assert parser.options[flag]["choices"] == choices(kind), flag


def test_the_trace_commands_choices_come_from_the_vocabularies() -> None:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    trace = sub.choices["trace"]  # type: ignore[index]
    found = {
        flag: action.choices
        for action in trace._actions
        if action.choices is not None
        for flag in action.option_strings
    }
    assert found == {flag: choices(kind) for flag, kind in CLI_CHOICES.items()}
    args = trace.parse_args(["kfunc:vfs_write"])
    assert (args.backend, args.pmu, args.filter) == ("auto", "hardware", None)


def test_a_wrong_choice_on_the_trace_command_lists_plain_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["trace", "kfunc:vfs_write", "--backend", "pt"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'pt' (choose from 'auto', 'lbr', 'graph')" in err, err
