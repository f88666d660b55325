"""A BPF object's line records as the compiler wrote them: `.BTF.ext` and the symbols.

The kernel gives a loaded program's line records by translated instruction, after
the verifier rewrote it; exact coverage needs them by the instructions libbpf loaded
(its main function, then the subprograms it appended). The object has them: its
`.BTF.ext` section holds, per ELF section, line records of (byte offset, file, line,
column) with the file and line as offsets into `.BTF`'s strings and function records
of (byte offset, BTF type id), and its symbol table where each function sits in its
section. `object_lines` reads them, from a file or a packaged object's bytes
(pyelftools for the ELF; the two BTF layouts are read here: libbpf has no public
call that gives a program's line records before libbpf 1.6's
`bpf_program__line_info`, and Debian 12 ships 1.1).

Layouts: include/uapi/linux/btf.h (`struct btf_header`) and tools/lib/bpf/libbpf_internal.h
(`struct btf_ext_header`, `btf_ext_info_sec`, `bpf_line_info`). Tested by
tests/programs/test_btf_ext.py (the repository's own built objects).
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["FunctionSymbol", "ObjectLines", "RawLine", "object_lines"]

_BTF_MAGIC = 0xEB9F
_STT_FUNC = "STT_FUNC"


@dataclass(frozen=True)
class RawLine:
    """One `.BTF.ext` line record: instruction index in its section, and its
    `bpf_line_info` fields as the kernel takes them (string offsets into `.BTF`)."""

    insn: int
    file_name_off: int
    line_off: int
    line_col: int

    @property
    def line(self) -> int:
        return self.line_col >> 10


@dataclass(frozen=True)
class FunctionSymbol:
    """A function of the object: its ELF section, first instruction, length."""

    name: str
    section: str
    insn: int
    count: int


@dataclass(frozen=True)
class ObjectLines:
    """An object's line records by ELF section, its functions, and `.BTF`'s strings."""

    lines: Mapping[str, tuple[RawLine, ...]]
    functions: tuple[FunctionSymbol, ...]
    strings: bytes
    #: ELF section -> its BTF function records: (instruction in the section, type id).
    func_records: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    #: The object's licence (its "license" section), NUL-terminated; b"" if none.
    license: bytes = b""

    def string(self, offset: int) -> str:
        """The `.BTF` string at `offset`."""
        end = self.strings.find(b"\0", offset)
        return self.strings[offset : end if end >= 0 else None].decode(errors="replace")

    def function(self, name: str, section: str | None = None) -> FunctionSymbol | None:
        """The function called `name` (in `section`, when given); None if absent or
        several match."""
        found = [f for f in self.functions if f.name == name and section in (None, f.section)]
        return found[0] if len(found) == 1 else None

    def packed(self, section: str) -> tuple[tuple[bytes, int, int], tuple[bytes, int, int]]:
        """`section`'s function and line records as BPF_PROG_LOAD takes them for a
        program that has the section to itself: (records, record size, count) each."""
        funcs = self.func_records.get(section, ())
        lines = self.lines.get(section, ())
        packed_funcs = b"".join(struct.pack("<II", i, t) for i, t in funcs)
        packed_lines = b"".join(
            struct.pack("<IIII", r.insn, r.file_name_off, r.line_off, r.line_col) for r in lines
        )
        return (packed_funcs, 8, len(funcs)), (packed_lines, 16, len(lines))

    def lines_of(self, fn: FunctionSymbol) -> list[RawLine]:
        """`fn`'s records, numbered from its first instruction."""
        end = fn.insn + fn.count
        return [
            RawLine(r.insn - fn.insn, r.file_name_off, r.line_off, r.line_col)
            for r in self.lines.get(fn.section, ())
            if fn.insn <= r.insn < end
        ]


def object_lines(path: str | os.PathLike[str] | bytes) -> ObjectLines:
    """Read the line and function records and the functions of the object at `path`
    (or the object's bytes: a packaged one). Raises ValueError: no BTF, a malformed
    section; OSError."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with io.BytesIO(path) if isinstance(path, bytes) else open(path, "rb") as f:
            elf = ELFFile(f)
            btf, ext = elf.get_section_by_name(".BTF"), elf.get_section_by_name(".BTF.ext")
            if btf is None or ext is None:
                raise ValueError("it has no .BTF / .BTF.ext (build it with clang -g)")
            strings = _btf_strings(btf.data())
            section = elf.get_section_by_name("license")
            licence = section.data().split(b"\0", 1)[0] + b"\0" if section is not None else b""
            data = ext.data()
            lines = {
                name: tuple(RawLine(*r) for r in recs)
                for name, recs in _records(data, strings, _LINE_INFO).items()
            }
            funcs = {
                name: tuple((r[0], r[1]) for r in recs)
                for name, recs in _records(data, strings, _FUNC_INFO).items()
            }
            names = {i: s.name for i, s in enumerate(elf.iter_sections())}
            symtab = elf.get_section_by_name(".symtab")
            symbols = symtab.iter_symbols() if isinstance(symtab, SymbolTableSection) else ()
            functions = tuple(
                FunctionSymbol(
                    sym.name,
                    names.get(sym["st_shndx"], ""),
                    sym["st_value"] // 8,
                    sym["st_size"] // 8,
                )
                for sym in symbols
                if sym["st_info"]["type"] == _STT_FUNC and isinstance(sym["st_shndx"], int)
            )
    except (ELFError, struct.error) as exc:
        raise ValueError(f"cannot read its BTF: {exc}") from None
    return ObjectLines(lines, functions, strings, funcs, licence)


def _btf_strings(data: bytes) -> bytes:
    magic, _version, _flags, hdr_len, _type_off, _type_len, str_off, str_len = struct.unpack_from(
        "<HBBIIIII", data
    )
    if magic != _BTF_MAGIC:
        raise ValueError(".BTF has a bad magic number")
    return data[hdr_len + str_off : hdr_len + str_off + str_len]


#: Where each kind of record is in `struct btf_ext_header` (its offset and length
#: fields), and how many u32 fields a record of it has.
_FUNC_INFO, _LINE_INFO = (8, 2), (16, 4)


def _records(
    data: bytes, strings: bytes, kind: tuple[int, int]
) -> dict[str, list[tuple[int, ...]]]:
    """One kind of `.BTF.ext` record by ELF section, the first field (a byte offset)
    made an instruction index."""
    magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data)
    if magic != _BTF_MAGIC:
        raise ValueError(".BTF.ext has a bad magic number")
    field_at, fields = kind
    off, length = struct.unpack_from("<II", data, field_at)
    start = hdr_len + off
    end = start + length
    out: dict[str, list[tuple[int, ...]]] = {}
    if length < 4:
        return out
    (rec_size,) = struct.unpack_from("<I", data, start)
    at = start + 4
    while at + 8 <= end:
        name_off, count = struct.unpack_from("<II", data, at)
        at += 8
        name_end = strings.find(b"\0", name_off)
        name = strings[name_off:name_end].decode(errors="replace")
        rows = []
        for k in range(count):
            row = struct.unpack_from(f"<{fields}I", data, at + k * rec_size)
            rows.append((row[0] // 8, *row[1:]))
        at += count * rec_size
        out[name] = rows
    return out
