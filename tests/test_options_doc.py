"""docs/guide.md's options table lists every `--lbr-*` option and `lbr_*` ini key the
plugin registers (read from its `pytest_addoption`), and nothing else; an option's
row names its ini key, and choices the table spells out are the option's."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytest_lbr import plugin

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


class _Registered:
    """Stands in for pytest's parser: records what `pytest_addoption` registers."""

    def __init__(self) -> None:
        #: flag -> its argparse keyword arguments (dest, choices...).
        self.options: dict[str, dict[str, Any]] = {}
        self.ini: set[str] = set()

    def getgroup(self, name: str, description: str = "") -> _Registered:
        return self

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        for flag in flags:
            self.options[flag] = kwargs

    def addini(self, name: str, help: str, type: str | None = None, default: Any = None) -> None:
        self.ini.add(name)


class Row(NamedTuple):
    option: str | None  # "--lbr-backend"
    values: str | None  # what follows "=": "auto\\|lbr\\|graph", "PATH", "any,..."
    ini: str | None  # "lbr_backend"


@pytest.fixture(scope="module")
def registered() -> _Registered:
    parser = _Registered()
    plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    for name in plugin.pytest_plugins:  # the plugins it registers (--lbr-cov's)
        importlib.import_module(name).pytest_addoption(parser)
    return parser


def _table() -> list[Row]:
    """The rows of the table under "## Turning tracing on" (option | ini key | meaning)."""
    section = GUIDE.read_text().split("\n## Turning tracing on\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[:2] == ["| option | ini key | meaning |", "| --- | --- | --- |"], lines[:2]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 3, line
        option = re.fullmatch(r"`(--lbr[a-z-]*)(?:=([^`]+))?`", cells[0])
        ini = re.match(r"`(lbr[a-z_]*)(?: = [^`]+)?`", cells[1])
        assert option or not cells[0], f"not an option: {cells[0]!r} ({line})"
        assert ini or not re.sub(r"\*\(addition\)\*", "", cells[1]).strip(), line
        rows.append(
            Row(
                option.group(1) if option else None,
                option.group(2) if option else None,
                ini.group(1) if ini else None,
            )
        )
    return rows


def test_every_option_is_in_the_table_and_nothing_else(registered: _Registered) -> None:
    listed = [r.option for r in _table() if r.option]
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    plugin_options = {flag for flag in registered.options if flag.startswith("--lbr")}
    assert plugin_options == set(registered.options)
    missing = sorted(plugin_options - set(listed))
    unknown = sorted(set(listed) - plugin_options)
    assert not missing, f"options missing from docs/guide.md's table: {missing}"
    assert not unknown, f"docs/guide.md's table lists options the plugin lacks: {unknown}"


def test_every_ini_key_is_in_the_table_and_nothing_else(registered: _Registered) -> None:
    listed = [r.ini for r in _table() if r.ini]
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert all(key.startswith("lbr") for key in registered.ini)
    missing = sorted(registered.ini - set(listed))
    unknown = sorted(set(listed) - registered.ini)
    assert not missing, f"ini keys missing from docs/guide.md's table: {missing}"
    assert not unknown, f"docs/guide.md's table lists ini keys the plugin lacks: {unknown}"


def test_an_options_row_names_its_own_ini_key(registered: _Registered) -> None:
    for row in _table():
        if row.option not in registered.options:  # none, or unknown (the first test says)
            continue
        dest = registered.options[row.option]["dest"]
        expected = dest if dest in registered.ini else None
        assert row.ini == expected, f"{row.option}: the table says {row.ini}, not {expected}"


def test_choices_the_table_spells_out_are_the_options(registered: _Registered) -> None:
    for row in _table():
        if row.option not in registered.options:  # none, or unknown (the first test says)
            continue
        accepted = registered.options[row.option].get("choices")
        action = registered.options[row.option].get("action")
        if action == "store_true":
            assert row.values is None, f"{row.option} takes no value"
            continue
        assert row.values, f"{row.option}: show what it takes (--opt=VALUE)"
        if accepted is None:
            continue
        why = f"{row.option}: the table shows {row.values!r}, it takes {'|'.join(accepted)}"
        if "\\|" in row.values:  # every choice: a\|b\|c
            assert tuple(row.values.split("\\|")) == accepted, why
        else:  # the first one, then "..."
            first, _, rest = row.values.partition(",")
            assert first in accepted and rest == "...", why
