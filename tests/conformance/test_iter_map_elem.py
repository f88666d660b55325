"""iter_map_elem.bpf.c: an iterator over a hash map's elements
(SEC("iter/bpf_map_elem")): per element a "key=value" line with BPF_SEQ_PRINTF,
counted and summed in .bss, and a trailer with the count and the sum when the walk
ends (the program's last run, with key == NULL).

The test fills the map and runs the iterator over it with `prog.iterate(map=...)` while tracing it.
An iterator of map elements is attached to one map (the kernel wants its fd in the
link's bpf_iter_link_info); the program's own map is the one it walks. Every
element in the output, the trailer and the .bss totals prove it ran; the trace has
to show BPF_SEQ_PRINTF, the name the C source wrote.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.conformance.evidence import assert_called, global_vars

PROG = "dump_scores"
SCORES = {3: 30, 7: 700, 11: 11}
HELPERS = ("BPF_SEQ_PRINTF",)


@pytest.mark.program_type("iter/bpf_map_elem")
def test_map_element_iterator_lists_the_map(bpf, lbr, built):
    obj = bpf.load(built("iter_map_elem"))
    prog = obj.programs[PROG]
    for key, value in SCORES.items():
        obj.maps["scores"].update(key, value)

    with lbr.trace(prog) as trace:
        out = prog.iterate(map=obj.maps["scores"])

    *lines, trailer = out.decode().splitlines()
    assert sorted(lines) == sorted(f"{k}={v}" for k, v in SCORES.items()), out
    assert trailer == f"{len(SCORES)} elements, total {sum(SCORES.values())}", out
    totals = {n: struct.unpack("<Q", raw)[0] for n, raw in global_vars(obj).items()}
    assert totals == {"elems": len(SCORES), "total": sum(SCORES.values())}, totals

    text = trace.edges()
    assert trace.hits and {h.pid for h in trace.hits} == {os.getpid()}, text
    assert_called(trace, PROG, HELPERS)
    assert "(unseen caller)" not in text, text
