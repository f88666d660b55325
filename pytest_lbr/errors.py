"""User errors: a mistake in what a test asked for, reported as one line.

Exceptions deriving from `UserError` (a bad or unknown target, a BPF object that
is missing or is not a BPF object, tracing that cannot be armed) carry a message
that says what is wrong and what to do. The plugin reports a test that fails
with one of them, or with a missing bcc, as that one line at the test's own
source line, without a traceback through the plugin (`one_line`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["BCC_MISSING", "CaptureError", "UserError", "bcc_import_failed", "one_line"]

_PACKAGE = Path(__file__).resolve().parent

#: Why `import bcc` fails in a venv, and the fix (bcc is not on PyPI under that name).
BCC_MISSING = (
    "bcc is not importable here: bcc comes with the OS (Debian/Ubuntu: apt-get install "
    "python3-bpfcc); make the venv with --system-site-packages so it sees it (the PyPI "
    "package named 'bcc' is a different project)"
)


class UserError(Exception):
    """A mistake in what the test asked for; the message is one actionable line."""


class CaptureError(UserError, RuntimeError):
    """Tracing could not be armed or collected; the message says why in one line."""


def bcc_import_failed(text: str) -> bool:
    """Does this error text say `import bcc` / `from bcc import BPF` failed?"""
    return "No module named 'bcc'" in text or "from 'bcc'" in text


def _is_bcc_import_error(exc: BaseException) -> bool:
    return isinstance(exc, ImportError) and bcc_import_failed(str(exc))


def _user_line(entries: list[Any], test_path: Path | None) -> str:
    """`path:line` of the test's own innermost frame (else the innermost outside this package)."""
    mine = [e for e in entries if test_path is not None and Path(str(e.path)) == test_path]
    outside = [e for e in entries if _PACKAGE not in Path(str(e.path)).resolve().parents]
    for entry in (mine or outside)[-1:]:
        path = Path(str(entry.path))
        try:
            shown = path.relative_to(Path.cwd())
        except ValueError:
            shown = path
        return f"{shown}:{entry.lineno + 1}"
    return ""


def one_line(excinfo: Any, test_path: Path | None = None) -> str | None:
    """The one-line report of a failure caused by a user error; None for any other failure.

    `test_path` is the test's module: the line shown is the test's own.
    """
    exc = excinfo.value
    if isinstance(exc, UserError):
        text = f"{type(exc).__name__}: {exc}"
    elif _is_bcc_import_error(exc):
        text = f"{type(exc).__name__}: {exc}: {BCC_MISSING}"
    else:
        return None
    where = _user_line(list(excinfo.traceback), test_path)
    return f"{where}: {text}" if where else text
