"""The exit statuses of pytest-lbr's commands and of a traced pytest session: one name
for each meaning, in one place (a command's `--help` lists those it uses).

Some meanings share a number because a protocol fixes it: `git bisect run` reads 0 as
good, 1 as bad and 125 as "this commit cannot be tested"; diff(1) exits 1 when its
inputs differ. Tested by tests/test_exit_codes.py.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD",
    "EXIT_CANNOT_TEST",
    "EXIT_FAILED",
    "EXIT_FOUND",
    "EXIT_GOOD",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_NO_GUEST",
    "EXIT_OK",
    "EXIT_USAGE",
]

#: The command did what was asked.
EXIT_OK = 0
#: The command could not do what was asked (no tracing here, a target that cannot be
#: traced, a guest's tests failed), or `pytest-lbr diff` found the traces differ.
EXIT_FAILED = 1
#: A mistake on the command line or in an input file (one line says which).
EXIT_USAGE = 2
#: `pytest-lbr vm`: a guest never reported (no boot, a panic, a hang, a tool missing).
EXIT_NO_GUEST = 6
#: Nothing could be tested here: a pytest session whose tracing could not run, a guest
#: that cannot boot under `pytest-lbr vm --bisect` (`git bisect run`'s "skip").
EXIT_CANNOT_TEST = 125
#: Stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130

#: `pytest-lbr bisect`: the first bad commit was found / was not (git bisect ended
#: without one, or only untestable commits were left).
EXIT_FOUND, EXIT_NOT_FOUND = 0, 1
#: One bisect step (`git bisect run`'s protocol): this commit is good / bad.
EXIT_GOOD, EXIT_BAD = 0, 1
