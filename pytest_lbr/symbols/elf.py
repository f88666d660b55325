"""Function symbols of a user-space ELF file: where to put a uprobe, and which
function a user address falls in.

uprobe_events takes `PATH:OFFSET` with a file offset, not a symbol name, so the
graph backend resolves names here (libbpf does the same for the LBR backend).
Addresses a probe reports are run-time addresses; `load_bias` turns them back
into the file's own virtual addresses using one address whose symbol is known.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from pathlib import Path

from elftools.common.exceptions import DWARFError, ELFError

__all__ = ["PARSE_ERRORS", "ElfError", "ElfFunctions"]

#: What pyelftools raises on a damaged or truncated file besides ELFError: it trusts
#: offsets, sizes and codes read from the file (found by tests/test_fuzz_elf.py).
PARSE_ERRORS = (
    ELFError,
    DWARFError,
    struct.error,
    zlib.error,
    ValueError,  # also UnicodeDecodeError
    IndexError,
    KeyError,
    TypeError,
    AttributeError,
    AssertionError,
    ZeroDivisionError,
    OverflowError,
    EOFError,
    RecursionError,
    NotImplementedError,  # forms and opcodes pyelftools does not know
    MemoryError,  # a size field larger than memory, refused at allocation
)


class ElfError(Exception):
    """The file is not a usable ELF, or has no such function; one clear message."""


class ElfFunctions:
    """The defined function symbols of one ELF file (.symtab, else .dynsym)."""

    def __init__(self, path: str | Path) -> None:
        """Read the symbols; ElfError (one line) if the file cannot be read or is
        not a usable ELF file (damaged, truncated) or has no function symbols."""
        from elftools.elf.elffile import ELFFile

        self.path = Path(path)
        named: dict[str, int] = {}
        spans: list[tuple[int, int, str]] = []
        self._segments: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
        try:
            with open(self.path, "rb") as f:
                elf = ELFFile(f)
                for seg in elf.iter_segments():
                    if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1:  # PF_X
                        self._segments.append((seg["p_vaddr"], seg["p_filesz"], seg["p_offset"]))
                table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
                symbols = table.iter_symbols() if table is not None else ()  # type: ignore[attr-defined]
                for sym in symbols:
                    if sym["st_info"]["type"] != "STT_FUNC" or sym["st_shndx"] == "SHN_UNDEF":
                        continue
                    named.setdefault(sym.name, sym["st_value"])
                    spans.append((sym["st_value"], max(sym["st_size"], 1), sym.name))
        except OSError as exc:
            raise ElfError(f"{self.path}: cannot read: {exc.strerror}") from None
        except PARSE_ERRORS as exc:
            # The message is one line whatever pyelftools put in it.
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ElfError(f"{self.path}: not an ELF file ({detail})") from None
        if not named:
            raise ElfError(f"{self.path}: has no function symbols (stripped?)")
        self._named = named
        spans.sort()
        self._starts = [s[0] for s in spans]
        self._spans = spans

    def address(self, name: str) -> int:
        """The function's virtual address in the file."""
        try:
            return self._named[name]
        except KeyError:
            raise ElfError(f"{self.path}: no function named {name!r}") from None

    def file_offset(self, name: str) -> int:
        """Where the function's first instruction is in the file: what uprobes take."""
        vaddr = self.address(name)
        for start, size, offset in self._segments:
            if start <= vaddr < start + size:
                return vaddr - start + offset
        raise ElfError(f"{self.path}: {name!r} is not in an executable segment")

    def return_type(self, name: str) -> str | None:
        """The probe fetch type of the function's return value from DWARF ("s32",
        "u64", ...), or None (no debug info, void, or not an integer/pointer).

        An `int` comes back in %eax with the upper half of %rax undefined, so a
        uretprobe must read it as s32 to see -1 rather than 4294967295.
        """
        try:
            with open(self.path, "rb") as f:
                from elftools.elf.elffile import ELFFile

                elf = ELFFile(f)
                if not elf.has_dwarf_info():
                    return None
                dwarf = elf.get_dwarf_info()
                for cu in dwarf.iter_CUs():
                    for die in cu.iter_DIEs():
                        if die.tag != "DW_TAG_subprogram":
                            continue
                        attr = die.attributes.get("DW_AT_name")
                        if attr is None or attr.value != name.encode():
                            continue
                        if "DW_AT_type" not in die.attributes:
                            return None  # void
                        return _fetch_type(die.get_DIE_from_attribute("DW_AT_type"))
        except (OSError, *PARSE_ERRORS):
            return None  # damaged DWARF: the probe reads the full register instead
        return None

    def locate(self, vaddr: int) -> tuple[str, int] | None:
        """(function, offset) holding the file virtual address `vaddr`, or None."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        while i >= 0:
            start, size, name = self._spans[i]
            if start <= vaddr < start + size:
                return name, vaddr - start
            if vaddr - start > 1 << 20:
                break
            i -= 1
        return None


def _fetch_type(die: object) -> str | None:
    """Follow typedefs and qualifiers to a base or pointer type: its fetch type."""
    seen = 0
    while seen < 16:
        tag = die.tag  # type: ignore[attr-defined]
        attrs = die.attributes  # type: ignore[attr-defined]
        if tag == "DW_TAG_pointer_type":
            return "x64"
        if tag == "DW_TAG_enumeration_type" or tag == "DW_TAG_base_type":
            size = attrs["DW_AT_byte_size"].value if "DW_AT_byte_size" in attrs else 0
            if size not in (1, 2, 4, 8):
                return None
            encoding = attrs["DW_AT_encoding"].value if "DW_AT_encoding" in attrs else 0
            # DW_ATE_signed (5), DW_ATE_signed_char (6); enums are int-like here
            signed = encoding in (5, 6) or tag == "DW_TAG_enumeration_type"
            return f"{'s' if signed else 'u'}{size * 8}"
        if tag in ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type"):
            if "DW_AT_type" not in attrs:
                return None
            die = die.get_DIE_from_attribute("DW_AT_type")  # type: ignore[attr-defined]
            seen += 1
            continue
        return None
    return None
