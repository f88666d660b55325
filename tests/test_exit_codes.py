"""One name for each exit status meaning, defined in `pytest_lbr.exit_codes` only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest_lbr
from pytest_lbr import exit_codes

PACKAGE = Path(pytest_lbr.__file__).resolve().parent
#: An exit status named anywhere: `EXIT_X = 1`, `EXIT_X, EXIT_Y = 0, 1` (a number).
_DEFINED = re.compile(r"^(EXIT_[A-Z_]+)\b(?:, EXIT_[A-Z_]+)* *= *\d", re.M)


def _defined_in(text: str) -> list[str]:
    return _DEFINED.findall(text)


def test_exit_statuses_are_named_only_in_exit_codes() -> None:
    elsewhere = [
        f"{p.relative_to(PACKAGE.parent)}: {name}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "exit_codes.py"
        for name in _defined_in(p.read_text())
    ]
    assert not elsewhere, "exit statuses named outside exit_codes.py:\n" + "\n".join(elsewhere)


def test_the_check_finds_a_planted_exit_status() -> None:
    planted = "EXIT_SKIP = 125\nEXIT_A, EXIT_B = 0, 1\nEXIT_HOOK_FRAMES = {}\n"
    assert _defined_in(planted) == ["EXIT_SKIP", "EXIT_A"]


def test_each_meaning_has_one_name() -> None:
    """The numbers a protocol fixes repeat (git bisect run, diff(1)); no meaning does:
    the names are the module's exports, each defined once."""
    text = Path(exit_codes.__file__).read_text()
    names = [n for line in re.findall(r"^(EXIT_.+?) *=", text, re.M) for n in line.split(", ")]
    assert sorted(names) == sorted(exit_codes.__all__)
    assert exit_codes.EXIT_CANNOT_TEST == 125  # git bisect run's "skip"
    assert (exit_codes.EXIT_GOOD, exit_codes.EXIT_BAD) == (0, 1)  # git bisect run's protocol
