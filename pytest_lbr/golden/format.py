"""The `.lbr` file format: header, `serialize` and `parse`.

A golden file is a fixed first line, `# key: value` header lines and the edge lines
`normalize` produced; only the edge lines are compared, the header says where they
came from. A file this version cannot read is refused with one actionable message
(`GoldenError`), never guessed at.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_lbr.model import Trace
from pytest_lbr.names import GoldenLevel

__all__ = ["FORMAT_VERSION", "LEVELS", "GoldenError", "GoldenFile", "parse", "serialize"]

#: Version of the file format; a file with another version is refused, not guessed at.
FORMAT_VERSION = 1
#: Levels of detail (`GoldenLevel`): call edges by function name, symbol+offset, or
#: file:line.
LEVELS = tuple(GoldenLevel)
_MAGIC = "# pytest-lbr golden trace"


class GoldenError(Exception):
    """A golden file that cannot be used (corrupt, empty, foreign); one actionable message."""


@dataclass
class GoldenFile:
    """A parsed golden file: header fields and edge lines."""

    header: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def level(self) -> str:
        """The level the edge lines were recorded at (`function` if the header omits it)."""
        return self.header.get("level", "function")

    @property
    def backend(self) -> str:
        """The capture backend the trace came from."""
        return self.header.get("backend", "")


def serialize(trace: Trace, lines: Iterable[str], level: str) -> str:
    """The text of a golden file for `trace` (already normalised to `lines`)."""
    header = [
        _MAGIC,
        f"# format: {FORMAT_VERSION}",
        f"# kernel: {trace.kernel_release or os.uname().release}",
        f"# arch: {trace.arch}",
        f"# backend: {trace.backend}",
        f"# level: {level}",
    ]
    return "\n".join([*header, *lines]) + "\n"


_CONFLICT_MARKERS = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")


def _shown(row: str) -> str:
    # A megabyte-long bad line would make the one-line error unreadable.
    return repr(row) if len(row) <= 80 else f"{row[:80]!r}... ({len(row)} characters)"


def parse(text: str | bytes, path: Path | str = "<golden>") -> GoldenFile:
    """Parse a golden file (its text, or its bytes as UTF-8).

    Raises `GoldenError`, one line naming `path`, for anything that is not a golden
    file of this version (not UTF-8, empty, foreign, corrupt, merge-conflicted).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GoldenError(
                f"{path}: not UTF-8 text (byte {exc.start}): re-create it with --lbr-golden-update"
            ) from None
    if not text.strip():
        raise GoldenError(f"{path}: empty golden file: re-create it with --lbr-golden-update")
    rows = text.splitlines()
    if rows[0] != _MAGIC:
        raise GoldenError(
            f"{path}:1: not a pytest-lbr golden trace (first line should be {_MAGIC!r})"
        )
    golden = GoldenFile()
    for n, row in enumerate(rows[1:], start=2):
        if row.startswith(_CONFLICT_MARKERS):
            raise GoldenError(
                f"{path}:{n}: unresolved merge conflict ({_shown(row)}): resolve it or "
                "re-create the file with --lbr-golden-update"
            )
        if row.startswith("#"):
            key, sep, value = row[1:].partition(":")
            if not sep:
                raise GoldenError(f"{path}:{n}: malformed header line {_shown(row)}")
            golden.header[key.strip()] = value.strip()
        elif row.startswith("hit ") or " -> " in row:
            golden.lines.append(row)
        elif row.strip():
            raise GoldenError(
                f"{path}:{n}: not an edge line (want 'a -> b' or 'hit T'): {_shown(row)}"
            )
    version = golden.header.get("format")
    if version != str(FORMAT_VERSION):
        shown = "None" if version is None else _shown(version)
        raise GoldenError(
            f"{path}: golden format version {shown}, this pytest-lbr reads "
            f"{FORMAT_VERSION}: re-create it with --lbr-golden-update"
        )
    missing = [k for k in ("kernel", "arch", "backend", "level") if k not in golden.header]
    if missing:
        raise GoldenError(f"{path}: header lacks {', '.join(missing)}")
    if golden.level not in LEVELS:
        raise GoldenError(f"{path}: unknown level {_shown(golden.level)}")
    return golden
