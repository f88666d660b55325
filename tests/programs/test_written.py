"""What each program was loaded from is its loader's book (`programs.written`), handed
to whoever reads it: there is no process-wide registry (issue 52)."""

from __future__ import annotations

from pytest_lbr.bpf import BpfLoader, Program
from pytest_lbr.bytecode.flow import without_constants
from pytest_lbr.model import Branch, Hit, Location, ProgramCalls
from pytest_lbr.programs.lines import read_span
from pytest_lbr.programs.written import Written, WrittenPrograms
from pytest_lbr.tracer import Tracer, add_source_lines
from tests.bpf.objects import bpf_object, require_root


def test_a_book_holds_what_it_was_given() -> None:
    book = WrittenPrograms()
    book.add(7, Written(b"\x95" + bytes(7), "/objs/x.bpf.o", "xdp_main"))
    book.add(8, Written(None, None, "made_by_hand"))
    assert book.insns(7) == b"\x95" + bytes(7)
    assert book.loaded_from(7) == ("/objs/x.bpf.o", "xdp_main")
    assert book.insns(8) is None and book.loaded_from(8) is None
    assert book.get(9) is None and 9 not in book and len(book) == 2
    assert WrittenPrograms().get(7) is None  # another book knows nothing of it


def test_two_loaders_books_are_their_own() -> None:
    require_root()
    path = bpf_object("xdp_helpers")
    with BpfLoader() as one, BpfLoader() as two:
        loaded = one.load(path)
        first = loaded.programs["xdp_helpers"]
        second = two.load(path).programs["xdp_helpers"]
        assert first.id in one.written and first.id not in two.written
        assert second.id in two.written and second.id not in one.written
        assert one.written.loaded_from(first.id) == (str(path), "xdp_helpers")
        mine, theirs = one.written.insns(first.id), two.written.insns(second.id)
        assert mine is not None and theirs is not None
        # The same object's code, but for its maps' fds.
        assert without_constants(mine) == without_constants(theirs)
        # Every program of an object goes into its loader's book, none elsewhere.
        ids = {p.id for p in loaded.programs.values()}
        assert all(i in one.written for i in ids) and not any(i in two.written for i in ids)


def described(prog: Program, tracer: Tracer) -> ProgramCalls:
    """The helper calls of `prog` as a trace of `tracer` names them (its book
    passed on as `Tracer.trace` does)."""
    start = read_span(prog.fd).functions[0][0]
    hits = [Hit(f"prog:{prog.id}", branches=[Branch(Location(start), Location(start), "jmp")])]
    add_source_lines(hits, written=tracer.written)
    calls = hits[0].branches[0].src.program
    assert calls is not None and calls.prog_id == prog.id, hits[0].branches[0].src
    return calls


def test_a_tracer_not_given_the_book_does_not_know_the_instructions() -> None:
    require_root()
    with BpfLoader() as loader, BpfLoader() as other:
        prog = loader.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
        untold, told, wrong = (
            Tracer(),
            Tracer(written=loader.written),
            Tracer(written=other.written),
        )
        assert untold.written is None
        # Asked in turn: each answer is its tracer's, whatever was asked before.
        assert not described(prog, untold).written
        as_written = described(prog, told)
        assert as_written.written and as_written.calls
        assert {c.helper for c in as_written.calls} >= {"bpf_csum_diff", "bpf_xdp_adjust_head"}
        assert not described(prog, wrong).written
        assert described(prog, told) == as_written
        assert not described(prog, untold).written
        for t in (untold, told, wrong):
            t.close()
