"""One source frame at an address (kept apart from `dwarf`, which imports pyelftools:
the disk cache and the symbolizer need the type without the parser)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Frame"]


class Frame(NamedTuple):
    """One source frame at an address, as llvm-symbolizer --inlining prints it.

    Frames come innermost first: the first is where the instruction is, each
    next one is the caller an inlined function was expanded into, with the
    line of that call.
    """

    function: str | None
    file: str | None
    line: int
