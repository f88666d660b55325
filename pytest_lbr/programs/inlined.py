"""Where an object's inlined functions were called: DWARF's inlined subroutines.

BTF line records give inlined code the callee's lines (`count()`'s body), so the
caller's `count(STAT_DENIED);` has no code of its own. The object's DWARF knows
better, as gcov and llvm-cov read it: each `DW_TAG_inlined_subroutine` holds the
address range of the inlined copy and `DW_AT_call_file`/`DW_AT_call_line`, the line
that called it. `inlined_calls` lists them by the function whose code holds them
(its name, as the symbol table has it) and instruction range in that function's
ELF section. Read with pyelftools, without applying relocations: a BPF object's
are REL (the addend is the field itself), so addresses read as section offsets.
Tested by tests/programs/test_inlined.py.
"""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass
from typing import Any

from pytest_lbr.programs.btf_ext import ObjectLines, object_lines

__all__ = ["InlinedCall", "inlined_calls", "object_facts"]


@dataclass(frozen=True)
class InlinedCall:
    """Instructions [start, end) of `function`'s section are an inlined copy of a
    function called at `file`:`line`."""

    function: str
    start: int
    end: int
    file: str
    line: int


def inlined_calls(path: str | os.PathLike[str]) -> tuple[InlinedCall, ...]:
    """The inlined calls of the object at `path` (none where it has no DWARF;
    raises OSError)."""
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.elf.elffile import ELFFile

    out: list[InlinedCall] = []
    with open(path, "rb") as f:
        try:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return ()
            dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
            for cu in dwarf.iter_CUs():
                files = _files(dwarf, cu)
                for die in cu.iter_DIEs():
                    if die.tag == "DW_TAG_inlined_subroutine":
                        out += _calls_of(dwarf, cu, die, files)
        except (DWARFError, ELFError, KeyError, IndexError, ValueError):
            return tuple(out)  # what could be read: a malformed rest adds nothing
    return tuple(out)


def object_facts(path: str | os.PathLike[str]) -> tuple[ObjectLines, tuple[InlinedCall, ...]]:
    """An object's line records and inlined calls, read once per version of the file
    (a test that loads its program per test loads the same object again and again;
    raises OSError, ValueError)."""
    st = os.stat(path)
    return _object_facts(os.fspath(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _object_facts(
    path: str, mtime_ns: int, size: int
) -> tuple[ObjectLines, tuple[InlinedCall, ...]]:
    return object_lines(path), inlined_calls(path)


def _files(dwarf: Any, cu: Any) -> list[str]:
    """The CU's file names by index (DWARF 5 counts from 0, earlier from 1)."""
    program = dwarf.line_program_for_CU(cu)
    if program is None:
        return []
    header = program.header
    dirs = [_text(d) for d in header.include_directory]
    comp_dir = _text(cu.get_top_DIE().attributes["DW_AT_comp_dir"].value)
    names = []
    for entry in header.file_entry:
        d = entry.dir_index
        if cu["version"] < 5:  # index 0 is the compilation directory, others from 1
            d = d - 1
            base = comp_dir if entry.dir_index == 0 else dirs[d]
        else:
            base = dirs[d] if d < len(dirs) else comp_dir
        names.append(posixpath.join(comp_dir, base, _text(entry.name)))
    return names if cu["version"] >= 5 else ["", *names]


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _calls_of(dwarf: Any, cu: Any, die: Any, files: list[str]) -> list[InlinedCall]:
    attrs = die.attributes
    if "DW_AT_call_line" not in attrs or "DW_AT_call_file" not in attrs:
        return []
    owner = die.get_parent()
    while owner is not None and owner.tag != "DW_TAG_subprogram":
        owner = owner.get_parent()
    if owner is None or "DW_AT_name" not in owner.attributes:
        return []
    function = _text(owner.attributes["DW_AT_name"].value)
    file = files[attrs["DW_AT_call_file"].value]
    line = int(attrs["DW_AT_call_line"].value)
    return [
        InlinedCall(function, lo // 8, hi // 8, file, line)
        for lo, hi in _ranges(dwarf, cu, die)
        if hi > lo
    ]


def _ranges(dwarf: Any, cu: Any, die: Any) -> list[tuple[int, int]]:
    """The DIE's address ranges (section offsets in an object file)."""
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        lo = int(attrs["DW_AT_low_pc"].value)
        hi = attrs["DW_AT_high_pc"]
        # DWARF 4 on: a constant form is the length, an address form the end.
        end = lo + int(hi.value) if hi.form.startswith("DW_FORM_data") else int(hi.value)
        return [(lo, end)]
    if "DW_AT_ranges" in attrs:
        lists = dwarf.range_lists()
        if lists is None:
            return []
        ranges = lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=cu)
        return [(r.begin_offset, r.end_offset) for r in ranges if hasattr(r, "begin_offset")]
    return []
