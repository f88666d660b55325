"""JIT code read from live memory for call-site searches (`capture.call_sites`), host part: a
trampoline is read to the end of its page, which also holds the pack's next images."""

from __future__ import annotations

from pytest_lbr.bpf import BpfObject
from pytest_lbr.capture.call_sites import calls_of, own_code
from pytest_lbr.programs.lines import jited_image
from tests.bpf.objects import bpf_object, require_root


def test_a_page_read_past_an_image_holds_only_its_own_calls() -> None:
    require_root()
    with BpfObject(bpf_object("xdp_helpers")) as a, BpfObject(bpf_object("xdp_helpers")) as b:
        start, image = jited_image(a.programs["xdp_helpers"].fd)
        _, neighbour = jited_image(b.programs["xdp_helpers"].fd)
    # What a pack's page holds: the image, the filler up to the next image, that image.
    page = image + b"\xcc" * 64 + neighbour + b"\xcc" * 32
    assert own_code(page) == own_code(image) == image.rstrip(b"\xcc")
    own = calls_of(own_code(page), start, len(page))
    assert own and own == calls_of(image, start, len(page))
    assert len(calls_of(page.rstrip(b"\xcc"), start, len(page))) > len(own)  # the neighbour's
