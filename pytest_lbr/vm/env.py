"""The guest's environment: what passes from the host, as `docker run -e` does.

The host side (`guest_environment`, `write_guest_env`) picks the host's PYTEST_*
variables and the `--env` ones and writes them into the guest's results
directory before boot; the guest side (`read_guest_env`) reads them once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_lbr.guest_mode import ENV_GUEST, ENV_RESULTS, ENV_STRICT

__all__ = [
    "GUEST_ENV_FILE",
    "env_option",
    "guest_environment",
    "read_guest_env",
    "write_guest_env",
]

#: The variables the guest gets from the host, as JSON in its results directory: written
#: before boot, read and deleted by the guest side. Not on the command line: vng carries
#: --exec on the kernel command line, which is short (2048 bytes on x86-64).
GUEST_ENV_FILE = ".guest-env.json"

#: PYTEST_* variables that describe a pytest process, not what the user asks for: pytest
#: and pytest-xdist set them in each test process (a test that runs `pytest-lbr vm`).
_PYTEST_PROCESS_STATE = frozenset(
    {
        "PYTEST_CURRENT_TEST",
        "PYTEST_VERSION",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
    }
)
#: What the guest side sets itself.
_GUEST_OWN = frozenset({ENV_GUEST, ENV_STRICT, ENV_RESULTS})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_option(text: str) -> tuple[str, str | None]:
    """`--env NAME=VALUE` or `--env NAME` (the host's value) as (NAME, VALUE or None)."""
    name, eq, value = text.partition("=")
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"--env {text!r}: expected NAME=VALUE or NAME (letters, digits, _)")
    return name, value if eq else None


def guest_environment(
    host: Mapping[str, str], wanted: Sequence[tuple[str, str | None]] = ()
) -> tuple[dict[str, str], list[str]]:
    """The variables a guest gets, and the `--env NAME`s the host does not have.

    Like `docker run -e`: the host's environment stays outside, but for its PYTEST_*
    variables (PYTEST_ADDOPTS, PYTEST_PLUGINS, ...; not pytest's per-process ones nor
    the guest's own PYTEST_LBR_GUEST/STRICT/RESULTS), then each `--env` in order:
    NAME=VALUE, or NAME with the host's value (left out, and named, when unset here).
    """
    env = {
        k: v
        for k, v in host.items()
        if k.startswith("PYTEST_") and k not in _PYTEST_PROCESS_STATE | _GUEST_OWN
    }
    unset = []
    for name, value in wanted:
        if value is None:
            if name not in host:
                unset.append(name)
                continue
            value = host[name]
        env[name] = value
    return env, unset


def write_guest_env(results: Path, env: Mapping[str, str]) -> None:
    """Host side, before boot: the variables for the guest (none: no file)."""
    path = results / GUEST_ENV_FILE
    path.unlink(missing_ok=True)
    if env:
        # Only this user reads it (values may be tokens); the guest deletes it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(dict(env), out)


def read_guest_env(results: Path) -> dict[str, str]:
    """Inside the guest: the variables the host passed (once: the file is deleted)."""
    path = results / GUEST_ENV_FILE
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    path.unlink(missing_ok=True)
    return {str(k): str(v) for k, v in env.items()}
