"""The object's own line records (`.BTF.ext`) against the kernel's of the same load.

The kernel keeps a program's line records by translated instruction; `object_lines`
reads them from the object as libbpf loaded it. For a program the verifier removed
nothing from, both list the same source lines in the same order, function by
function (libbpf appends a subprogram after the main function, as the kernel
shows it). Host, as root: tests/bpf's built objects.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.programs.btf_ext import object_lines
from pytest_lbr.programs.info import Btf, program_details
from tests.bpf.objects import bpf_object, require_root


@pytest.fixture
def loader() -> Iterator[BpfLoader]:
    require_root()
    with BpfLoader() as bpf:
        yield bpf


@pytest.mark.parametrize(
    ("obj", "prog", "functions"),
    [
        ("many_arms", "many_arms", [("many_arms", "xdp"), ("account", ".text")]),
        ("xdp_helpers", "xdp_helpers", [("xdp_helpers", "xdp"), ("note_cpu", ".text")]),
        ("xdp_helpers", "xdp_cpu", [("xdp_cpu", "xdp")]),
    ],
)
def test_the_objects_line_records_are_the_kernels(
    loader: BpfLoader, obj: str, prog: str, functions: list[tuple[str, str]]
) -> None:
    path = bpf_object(obj)
    found = object_lines(path)
    program = loader.load(path).programs[prog]
    details = program_details(program.fd, lines=True)
    with Btf(details.btf_id) as btf:
        kernel = [(btf.string(li.file_name_off), li.line_col >> 10) for li, _ in details.lines]
    ours = []
    for name, section in functions:
        sym = found.function(name, section)
        assert sym is not None, name
        ours += [(found.string(r.file_name_off), r.line) for r in found.lines_of(sym)]
    assert ours == kernel
    assert len(ours) > 3


def test_an_object_without_btf_is_one_clear_error(tmp_path) -> None:
    plain = tmp_path / "plain.o"
    plain.write_bytes(bpf_object("many_arms").read_bytes()[:64])
    with pytest.raises(ValueError, match="cannot read its BTF|no .BTF"):
        object_lines(plain)


def test_function_records_and_a_packaged_object_read_the_same(loader: BpfLoader) -> None:
    """The function records are the kernel's func_info of the same load (its BTF type
    ids, one per function), and an object given as bytes reads as from its file."""
    path = bpf_object("many_arms")
    found = object_lines(path)
    assert object_lines(path.read_bytes()) == found
    details = program_details(loader.load(path).programs["many_arms"].fd)
    ours = [t for _, t in found.func_records["xdp"]] + [t for _, t in found.func_records[".text"]]
    assert ours == details.func_types
    assert [i for i, _ in found.func_records["xdp"]] == [0]


def test_a_sections_records_packed_as_the_kernel_takes_them() -> None:
    found = object_lines(bpf_object("xdp_helpers"))
    assert found.license == b"Dual BSD/GPL\0"
    (funcs, fsize, fcount), (lines, lsize, lcount) = found.packed("xdp")
    assert (fsize, lsize) == (8, 16)
    assert len(funcs) == 8 * fcount and len(lines) == 16 * lcount
    assert lcount == len(found.lines["xdp"]) and fcount == len(found.func_records["xdp"])
    first = found.lines["xdp"][0]
    assert lines[:16] == struct.pack(
        "<IIII", first.insn, first.file_name_off, first.line_off, first.line_col
    )
