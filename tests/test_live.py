"""Live captures on the host: `GraphCapture.poll()` over real function-tracer text
(tests/data, a write(2) to /dev/null with vfs_write's kretprobe event, from the 6.12
guest) handed over in pieces, as trace_pipe hands it over.

The pieces are whole lines, single lines, or cut anywhere (a read ends between
lines in the kernel, but the capture must not care). However the text comes, every
hit comes once, complete, and equal to what the whole text makes at once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_lbr.capture import Scope
from pytest_lbr.capture.graph import live_state as graph_live
from pytest_lbr.capture.graph.backend import GraphCapture
from pytest_lbr.capture.graph.hits import build_hits
from pytest_lbr.capture.graph.live_state import LiveState
from pytest_lbr.capture.graph.text import parse_trace
from pytest_lbr.model import Hit
from pytest_lbr.targets import parse_target

DATA = Path(__file__).parent / "data"
LINE = re.compile(r"^(\s*\S+?)-(\d+)(\s+)(\[\d+\]\s+\S+\s+)(\d+)\.(\d+)(:.*)$")


def _writes(tids: list[int], repeat: int) -> str:
    """The data file's write(2), `repeat` times per thread, the threads interleaved."""
    body = [
        line
        for line in (DATA / "ftrace-6.12-vfs_write.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    out: list[tuple[int, str]] = []
    for k, tid in enumerate(tids):
        for n in range(repeat):
            for line in body:
                m = LINE.match(line)
                assert m, line
                us = int(m[5]) * 1_000_000 + int(m[6]) + n * 1000 + k * 7
                text = f"{m[1]}-{tid}{m[3]}{m[4]}{us // 1_000_000}.{us % 1_000_000:06d}{m[7]}"
                out.append((us, text))
    out.sort(key=lambda p: p[0])
    return "".join(text + "\n" for _, text in out)


class FakeInstance:
    """What a live capture reads from its tracefs instance: trace_pipe, in pieces."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = list(pieces)

    def read_pipe(self, limit: int = 0) -> str:
        return self.pieces.pop(0) if self.pieces else ""

    def lost(self) -> int:
        return 0

    def unread(self) -> int:
        return 0

    def write(self, name: str, value: str) -> None:
        pass

    def disarm(self) -> None:
        pass

    def set_notrace_pids(self, pids: object) -> None:
        pass


def _capture(spec: str, pieces: list[str], event: str = "e0") -> GraphCapture:
    """A live system-scope capture of `spec` armed on a fake instance (no kernel);
    `event`: vfs_write's return event, as the text names it."""
    capture = GraphCapture([parse_target(spec)], scope=Scope.of("system"))
    target = capture.targets[0]
    function = target.function or ""
    capture._matchers = [
        lambda name, addr: (
            name == function or (target.is_glob and name.startswith(function.rstrip("*")))
        )
    ]
    if spec == "kfunc:vfs_write":
        capture._events, capture._returns = {0: event}, {event: "vfs_write"}
    capture._live = LiveState()
    capture._instance = FakeInstance(pieces)  # type: ignore[assignment]
    return capture


def _stream(capture: GraphCapture, polls: int) -> list[Hit]:
    hits: list[Hit] = []
    for _ in range(polls):
        hits.extend(capture.poll())
    return hits + capture.stop().hits


def _whole(capture: GraphCapture, text: str) -> list[Hit]:
    return build_hits(
        capture.targets,
        capture._matchers,
        capture._events,
        capture._returns,
        parse_trace(text),
        interrupts=True,
    )


def _pieces(text: str, how: str) -> list[str]:
    if how == "lines":
        return text.splitlines(keepends=True)
    if how == "cut":  # anywhere, also inside a line
        return [text[i : i + 97] for i in range(0, len(text), 97)]
    return [text]


@pytest.mark.parametrize("how", ["whole", "lines", "cut"])
def test_each_write_comes_once_complete_and_as_the_whole_text_makes_it(how: str) -> None:
    text = _writes([286, 901], repeat=3)
    pieces = _pieces(text, how)
    capture = _capture("kfunc:vfs_write", pieces)
    polled: list[Hit] = []
    for _ in pieces:
        polled.extend(capture.poll())
    # Each hit is complete when its return event has been read: before stop().
    assert len(polled) == 6
    rest = capture.stop().hits
    assert rest == []
    whole = _whole(capture, text)
    key = lambda h: (h.tid, h.timestamp_ns)  # noqa: E731
    assert sorted(polled, key=key) == sorted(whole, key=key)
    assert all(h.retval == 1 and h.branches for h in polled)


def _quick_cuts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each context's poll took the one-build way (`_returned_hits`)."""
    taken: list[bool] = []
    quick = graph_live._returned_hits

    def spy(*args: object) -> object:
        found = quick(*args)  # type: ignore[arg-type]
        taken.append(found is not None)
        return found

    monkeypatch.setattr(graph_live, "_returned_hits", spy)
    return taken


@pytest.mark.parametrize("how", ["whole", "lines", "cut"])
def test_a_narrowed_stream_is_cut_at_its_last_return_in_one_build(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system-wide trace narrowed to vfs_write records a write as its entry and its
    return event (tests/data, a live --all trace in the 6.12 guest). A poll hands over
    the writes up to the last return event it read, built once, and they are what
    the whole text makes."""
    text = (DATA / "ftrace-6.12-vfs_write-narrowed.txt").read_text()
    pieces = _pieces(text, how)
    capture = _capture("kfunc:vfs_write", pieces, event="e1")
    taken = _quick_cuts(monkeypatch)
    polled: list[Hit] = []
    handing = 0  # polls that handed hits over
    for _ in pieces:
        hits = capture.poll()
        polled.extend(hits)
        handing += bool(hits)
    assert len(polled) == 80 and capture.stop().hits == []
    assert polled == _whole(capture, text)
    assert all(h.retval == 1 and len(h.branches) == 2 for h in polled)
    # Every poll that read a return event handed its writes over the quick way.
    assert handing and taken.count(True) == handing


@pytest.mark.parametrize("how", ["whole", "lines", "cut"])
def test_a_lost_return_event_ends_its_hit_and_holds_nothing_back(how: str) -> None:
    """A ring buffer that overran drops records: here write 10's return event (the
    real 6.12 text with that one line gone). The thread's next write, called where
    write 10 was, shows it returned: write 10 is a hit without a return value, and
    every later write is a hit of its own, handed over by the polls as before (not
    made part of write 10, nor held back until `stop()`)."""
    lines = (DATA / "ftrace-6.12-vfs_write-narrowed.txt").read_text().splitlines(keepends=True)
    returns = [i for i, line in enumerate(lines) if ": e1: (" in line]
    del lines[returns[9]]
    text = "".join(lines)
    capture = _capture("kfunc:vfs_write", _pieces(text, how), event="e1")
    polled: list[Hit] = []
    for _ in _pieces(text, how):
        polled.extend(capture.poll())
    assert len(polled) == 80 and capture.stop().hits == []
    assert polled == _whole(capture, text)
    assert [h.retval for h in polled] == [1] * 9 + [None] + [1] * 70
    assert all(len(h.branches) == 2 for h in polled)


def test_records_whose_nesting_looks_ahead_are_built_the_general_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vfs_write's own calls name parents entered unseen: nesting them asks which
    frames later records show still running. Cut at a return event, a later record
    could change the answer, so the poll does not take the one-build way."""
    text = _writes([286], repeat=3)
    capture = _capture("kfunc:vfs_write", text.splitlines(keepends=True))
    taken = _quick_cuts(monkeypatch)
    polled = _stream(capture, len(text.splitlines()))
    assert polled == _whole(capture, text)
    assert taken and not any(taken)


def test_a_hit_waits_for_its_return_event_and_its_records_are_dropped() -> None:
    text = _writes([286], repeat=2)
    lines = text.splitlines(keepends=True)
    event = next(i for i, line in enumerate(lines) if ": e0: " in line)
    capture = _capture("kfunc:vfs_write", ["".join(lines[:event]), "".join(lines[event:])])
    assert capture.poll() == []  # vfs_write has not returned yet
    live = capture._live
    assert live is not None and live.records  # its records are kept
    first = capture.poll()
    assert [h.retval for h in first] == [1, 1]
    assert not live.records  # nothing left once every hit is handed over


def test_a_glob_hit_comes_when_the_thread_moves_on_or_goes_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _writes([286], repeat=2)
    lines = text.splitlines(keepends=True)
    second = [i for i, line in enumerate(lines) if " vfs_write+0x4/" in line][1]
    capture = _capture("kfunc:vfs_wri*", ["".join(lines[:second]), "".join(lines[second:]), ""])
    assert capture.poll() == []  # no return event for a glob: still open
    moved_on = capture.poll()  # the second write started: the first is over
    assert len(moved_on) == 1 and moved_on[0].retval is None
    monkeypatch.setattr(graph_live, "LIVE_QUIET_S", 0.0)
    quiet = capture.poll()
    assert len(quiet) == 1 and quiet[0].timestamp_ns > moved_on[0].timestamp_ns
    assert capture.stop().hits == []


def test_this_process_and_records_before_arming_are_not_kept() -> None:
    import os

    text = _writes([os.getpid()], repeat=1)
    capture = _capture("kfunc:vfs_write", [text])
    capture._live.own = {os.getpid()}  # type: ignore[union-attr]
    assert capture.poll() == [] and not capture._live.records  # type: ignore[union-attr]
    late = _capture("kfunc:vfs_write", [_writes([286], repeat=1)])
    late._window = (10**18, 0)
    assert late.poll() == [] and late.stop().hits == []


def test_live_needs_a_scope_of_other_tasks() -> None:
    from pytest_lbr.capture import CaptureError

    with pytest.raises(CaptureError, match="cannot record its own process"):
        GraphCapture([parse_target("kfunc:vfs_write")]).live()
