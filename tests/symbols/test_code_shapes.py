"""x86-64 code decoded once per shape (`symbols.code_shapes`): the JIT image of a
program loaded again is taken from its first decoding, and every decoding equals
capstone's own, whatever the bytes."""

from __future__ import annotations

from collections.abc import Iterator

import capstone
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lbr.bpf import BpfObject
from pytest_lbr.programs.lines import jited_image
from pytest_lbr.symbols.code_shapes import decode, shapes_kept
from pytest_lbr.symbols.disasm import disassemble
from tests.bpf.objects import bpf_object, require_root

MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
CALLS = frozenset({"call", "jmp"})


@pytest.fixture(scope="module")
def two_images() -> Iterator[tuple[tuple[int, bytes], tuple[int, bytes]]]:
    """The JIT images of one program loaded twice (both loaded at once: two addresses,
    two sets of maps)."""
    require_root()
    with BpfObject(bpf_object("xdp_helpers")) as a, BpfObject(bpf_object("xdp_helpers")) as b:
        yield jited_image(a.programs["xdp_helpers"].fd), jited_image(b.programs["xdp_helpers"].fd)


def truth(code: bytes, addr: int) -> list[tuple[int, int, str, str]]:
    return list(MD.disasm_lite(code, addr))


def test_a_program_loaded_again_is_decoded_from_its_shape(
    two_images: tuple[tuple[int, bytes], tuple[int, bytes]],
) -> None:
    (start1, image1), (start2, image2) = two_images
    # The same program: other addresses, other map addresses and call displacements.
    assert start1 != start2 and len(image1) == len(image2) and image1 != image2
    assert decode(image1, start1, MD) == truth(image1, start1)
    kept = shapes_kept()
    assert decode(image2, start2, MD) == truth(image2, start2)
    assert shapes_kept() == kept  # matched the first: not decoded by capstone again
    calls = [i for i in disassemble(image2, start2) if i.mnemonic == "call"]
    assert calls and all(int(i.operands, 16) != 0 for i in calls)


#: What a 6.12 trampoline loads its program's address with (`mov rax, simm32`),
#: then a value capstone writes in decimal, then `ret`.
TRAMPOLINE_TAIL = bytes.fromhex("48c7c094892dc0 48c7c001000000 48b80300000000000000 c3")


@settings(max_examples=200, deadline=None)
@given(
    tail=st.booleans(),
    shift=st.integers(-(1 << 20), 1 << 20),
    edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4),
)
def test_any_code_decodes_as_capstone_decodes_it(
    two_images: tuple[tuple[int, bytes], tuple[int, bytes]],
    tail: bool,
    shift: int,
    edits: list[tuple[int, int]],
) -> None:
    """The real image (or it and a trampoline's loads) with a few bytes changed
    anywhere (inside an immediate or not: the shape matches or is decoded anew),
    at another address."""
    (start, image), _ = two_images
    image += TRAMPOLINE_TAIL if tail else b""
    decode(image, start, MD)  # its shape is kept
    code = bytearray(image)
    for pos, value in edits:
        code[pos % len(code)] = value
    addr = start + shift
    expected = truth(bytes(code), addr)
    assert decode(bytes(code), addr, MD) == expected
    # A call-site search's calls and jumps: the same, if others may be left out.
    calls = [d for d in decode(bytes(code), addr, MD, CALLS) if d[2] in CALLS]
    assert calls == [d for d in expected if d[2] in CALLS]
