"""File:line and inlined frames from DWARF with pyelftools, one compile unit at a time.

A debug vmlinux holds ~3,000 compile units and 170 MB of .debug_info: decoding
it all would take minutes. For each address we find its compile unit through
`.debug_aranges`, decode only that unit's line program, and walk only the
subprogram that contains the address (skipping siblings via DW_AT_sibling) to
find its inlined_subroutine chain. Decoded units stay in memory for the session.

The DWARF of vmlinux is never relocated: vmlinux is ET_EXEC linked with
--emit-relocs, so the section contents already hold final addresses and the
huge .rela.debug_* sections would only cost time.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from typing import Any, BinaryIO

from elftools.dwarf.ranges import BaseAddressEntry
from elftools.elf.elffile import ELFFile

from .elf import PARSE_ERRORS
from .frame import Frame

__all__ = ["DwarfError", "DwarfLines", "Frame", "kernel_relative"]


class DwarfError(ValueError):
    """The file's DWARF cannot be read (none, damaged, truncated); one line naming the file."""


_BUILD_DIR_MARKERS = ("/build_amd64_none_amd64/", "/build_arm64_none_arm64/")


def kernel_relative(path: str | None) -> str | None:
    """A source path as a kernel developer names it: relative to the kernel tree.

    Debian builds in `debian/build/build_<arch>_none_<arch>/`; other builds
    leave an absolute build directory. Both are stripped so that paths read
    like `kernel/bpf/syscall.c`.
    """
    if not path:
        return path
    p = os.path.normpath(path)
    for marker in _BUILD_DIR_MARKERS:
        i = p.find(marker)
        if i >= 0:
            return p[i + len(marker) :]
    if p.startswith("debian/build/"):
        parts = p.split("/", 3)
        return parts[3] if len(parts) > 3 else p
    return p


_INLINE_TAGS = ("DW_TAG_inlined_subroutine", "DW_TAG_lexical_block")


class _Unit:
    """The decoded parts of one compile unit: line rows and subprogram ranges."""

    def __init__(self, dwarf: Any, cu: Any) -> None:
        self.dwarf = dwarf
        self.cu = cu
        top = cu.get_top_DIE()
        self.comp_dir = _attr_str(top, "DW_AT_comp_dir") or ""
        low = top.attributes.get("DW_AT_low_pc")
        self.base = low.value if low is not None else 0
        self._decode_lines()
        self._index_subprograms(top)

    # -- lines ----------------------------------------------------------------

    def _decode_lines(self) -> None:
        prog = self.dwarf.line_program_for_CU(self.cu)
        self.files: list[str | None] = []
        rows: list[tuple[int, int, int, int]] = []  # (addr, order, line, file) ; order 0 = end
        if prog is None:
            self.addrs: list[int] = []
            self.rows = rows
            return
        header = prog.header
        version = header["version"]
        dirs = [_decode(d) for d in header["include_directory"]]
        if version < 5:
            dirs.insert(0, self.comp_dir)
        for entry in header["file_entry"]:
            name = _decode(entry.name)
            d = dirs[entry.dir_index] if entry.dir_index < len(dirs) else ""
            full = name if name.startswith("/") else os.path.join(d, name)
            if not full.startswith("/") and self.comp_dir and not d.startswith("/"):
                full = os.path.join(self.comp_dir, full)
            self.files.append(kernel_relative(full))
        base_file = 0 if version >= 5 else 1
        seq = 0
        for entry in prog.get_entries():
            state = entry.state
            if state is None:
                continue
            if state.end_sequence:
                rows.append((state.address, 0, 0, -1))
                seq += 1
            else:
                rows.append((state.address, 1, state.line, state.file - base_file))
        # Stable sort: at one address an end of sequence sorts before a start.
        rows.sort(key=lambda r: (r[0], r[1]))
        self.rows = rows
        self.addrs = [r[0] for r in rows]

    def line_at(self, addr: int) -> tuple[str | None, int] | None:
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0:
            return None
        _, kind, line, file = self.rows[i]
        if kind == 0:
            return None
        name = self.files[file] if 0 <= file < len(self.files) else None
        return name, line

    # -- subprograms and inlines ------------------------------------------------

    def _index_subprograms(self, top: Any) -> None:
        spans: list[tuple[int, int, Any]] = []
        for die in self.cu.iter_DIE_children(top):
            if die.tag != "DW_TAG_subprogram":
                continue
            for lo, hi in self.ranges(die):
                spans.append((lo, hi, die))
        spans.sort(key=lambda s: s[0])
        self.spans = spans
        self.span_starts = [s[0] for s in spans]

    def ranges(self, die: Any) -> list[tuple[int, int]]:
        attrs = die.attributes
        low = attrs.get("DW_AT_low_pc")
        if low is not None:
            high = attrs.get("DW_AT_high_pc")
            if high is None:
                return [(low.value, low.value + 1)]
            hv = high.value if high.form == "DW_FORM_addr" else low.value + high.value
            return [(low.value, hv)]
        rng = attrs.get("DW_AT_ranges")
        if rng is None:
            return []
        lists = self.dwarf.range_lists()
        if lists is None:
            return []
        # pyelftools has already turned DW_FORM_rnglistx into a section offset.
        entries = lists.get_range_list_at_offset(rng.value, cu=self.cu)
        out = []
        base = self.base
        for e in entries:
            if isinstance(e, BaseAddressEntry):
                base = e.base_address
                continue
            off = 0 if e.is_absolute else base
            out.append((e.begin_offset + off, e.end_offset + off))
        return out

    def subprogram_at(self, addr: int) -> Any | None:
        i = bisect.bisect_right(self.span_starts, addr) - 1
        # Spans never nest at the top level, but a cold part may sit before a
        # hot one: look back a few entries.
        for j in range(i, max(i - 4, -1), -1):
            lo, hi, die = self.spans[j]
            if lo <= addr < hi:
                return die
        return None

    def inline_chain(self, die: Any, addr: int) -> list[Any]:
        """Inlined_subroutine DIEs containing addr under `die`, outermost first."""
        chain: list[Any] = []
        node = die
        while True:
            nxt = None
            for child in self.cu.iter_DIE_children(node):
                if child.tag not in _INLINE_TAGS:
                    continue
                if any(lo <= addr < hi for lo, hi in self.ranges(child)):
                    nxt = child
                    break
            if nxt is None:
                return chain
            if nxt.tag == "DW_TAG_inlined_subroutine":
                chain.append(nxt)
            node = nxt

    def file_name(self, index: int) -> str | None:
        # DW_AT_call_file indexes the same file table as the line program.
        version = self.cu.header["version"]
        i = index if version >= 5 else index - 1
        return self.files[i] if 0 <= i < len(self.files) else None


def _decode(b: bytes | str) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b


def _attr_str(die: Any, name: str) -> str | None:
    a = die.attributes.get(name)
    return None if a is None else _decode(a.value)


def _function_name(die: Any) -> str | None:
    """A subprogram's or inline's name, following abstract_origin/specification."""
    seen = 0
    while die is not None and seen < 8:
        for attr in ("DW_AT_linkage_name", "DW_AT_name"):
            if attr in die.attributes:
                return _attr_str(die, attr)
        nxt = None
        for attr in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if attr in die.attributes:
                nxt = die.get_DIE_from_attribute(attr)
                break
        die = nxt
        seen += 1
    return None


class DwarfLines:
    """Address -> source frames for one ELF file, decoding DWARF lazily per unit."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the file; DwarfError (one line) if it has no readable DWARF, and
        later from `frames`/`lookup` where a unit they decode is damaged."""
        self.path = os.fspath(path)
        self._file: BinaryIO = open(self.path, "rb")  # noqa: SIM115 -- kept for lazy reads
        try:
            self.elf = ELFFile(self._file)
            if (
                self.elf.get_section_by_name(".debug_info") is None
            ):  # .eh_frame alone is not DWARF lines
                raise DwarfError(f"{self.path}: no DWARF debug information")
            self.dwarf = self.elf.get_dwarf_info(relocate_dwarf_sections=False)
            self.aranges = self.dwarf.get_aranges()
        except BaseException as exc:
            self._file.close()
            if isinstance(exc, (OSError, *PARSE_ERRORS)) and not isinstance(exc, DwarfError):
                raise self._damaged(exc) from None
            raise
        self._units: dict[int, _Unit] = {}

    def _damaged(self, exc: BaseException) -> DwarfError:
        # pyelftools trusts every offset and size in the file: whatever it raised
        # on a damaged one becomes one line naming the file.
        detail = " ".join(str(exc).split())[:200]
        return DwarfError(f"{self.path}: damaged DWARF ({type(exc).__name__}: {detail})")

    def close(self) -> None:
        """Close the ELF file."""
        self._file.close()

    def __enter__(self) -> DwarfLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unit_offset(self, addr: int) -> int | None:
        """The offset of the compile unit covering `addr`, from .debug_aranges."""
        if self.aranges is None:
            return None
        return self.aranges.cu_offset_at_addr(addr)

    def _unit(self, offset: int) -> _Unit:
        unit = self._units.get(offset)
        if unit is None:
            unit = _Unit(self.dwarf, self.dwarf.get_CU_at(offset))
            self._units[offset] = unit
        return unit

    def frames(self, addr: int) -> tuple[Frame, ...]:
        """Source frames at `addr`, innermost first; () when DWARF does not cover it.

        DwarfError (one line) when the DWARF that covers it is damaged.
        """
        try:
            return self._frames(addr)
        except DwarfError:
            raise
        except (OSError, *PARSE_ERRORS) as exc:  # OSError: a seek to a damaged offset
            raise self._damaged(exc) from None

    def _frames(self, addr: int) -> tuple[Frame, ...]:
        off = self.unit_offset(addr)
        if off is None:
            return ()
        unit = self._unit(off)
        where = unit.line_at(addr)
        sub = unit.subprogram_at(addr)
        if where is None and sub is None:
            return ()
        file, line = where if where is not None else (None, 0)
        chain = unit.inline_chain(sub, addr) if sub is not None else []
        out: list[Frame] = []
        # Innermost first: the deepest inline holds the instruction's own line,
        # and each inline's call_file/call_line is the line in its caller.
        funcs = [sub, *chain]
        for depth in range(len(funcs) - 1, -1, -1):
            die = funcs[depth]
            out.append(Frame(_function_name(die) if die is not None else None, file, line))
            if depth > 0:
                inl = funcs[depth]
                cf = inl.attributes.get("DW_AT_call_file")
                cl = inl.attributes.get("DW_AT_call_line")
                file = unit.file_name(cf.value) if cf is not None else None
                line = cl.value if cl is not None else 0
        return tuple(out)

    def lookup(self, addrs: Iterable[int]) -> dict[int, tuple[Frame, ...]]:
        """Frames for many addresses, decoding each needed unit once (sorted order)."""
        return {a: self.frames(a) for a in sorted(set(addrs))}
