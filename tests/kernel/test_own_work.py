"""The tracer's own work never shows as the traced process's (issue 50).

A user's program attached for this process before `lbr.trace(...)` counts what this
process does: here the directories it makes and removes (kprobes on do_mkdirat and
do_rmdir) and the processes and threads it starts (sched_process_fork), from
tests/bpf/own_work.bpf.c. Each trace block makes one directory, removes it and runs
one child, so the program must count exactly that, block after block, with the
session's tracer and with a tracer set up with `Tracer.prepare()`: the graph
backend's tracefs instance (mkdir in tracefs), the stale instances it removes
(rmdir) and the modules a trace imports (pytest's assertion rewriting calls mkdir(2)
for each pytest-lbr module it loads) all come before the block. A tracer used
without `prepare()` still does that work in its first trace, and that trace's
notes say so, as they name the llvm-symbolizer processes started where kernel
file:line comes from a debug vmlinux (the 6.1 guest's, when the line cache lacks
an address): forks the program counts too.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader, BpfObject
from pytest_lbr.tracer import Tracer
from tests.bpf.objects import bpf_object

pytestmark = pytest.mark.kernel

#: Slots of own_work.bpf.c's `counts`: (mkdir, rmdir, fork).
SLOTS = 3
#: What one block's body does: one mkdir, one rmdir, one child.
ONE_EACH = (1, 1, 1)
PROGRAMS = ("own_mkdir", "own_rmdir", "own_fork")


@pytest.fixture
def counter() -> Iterator[BpfObject]:
    """own_work.bpf.c loaded and attached, counting this process's calls."""
    with BpfLoader().load(bpf_object("own_work")) as obj:
        obj.maps["target"].update(struct.pack("<I", 0), struct.pack("<I", os.getpid()))
        links = [obj.programs[name].attach() for name in PROGRAMS]
        try:
            yield obj
        finally:
            for link in links:
                link.close()


def counts(obj: BpfObject) -> tuple[int, ...]:
    """(mkdirs, rmdirs, forks) of this process counted so far."""
    table = obj.maps["counts"]
    return tuple(struct.unpack("<Q", table[struct.pack("<I", i)])[0] for i in range(SLOTS))


def body(where: Path) -> None:
    os.mkdir(where)
    os.rmdir(where)
    subprocess.run(["true"], check=True)


def symbolizer_forks(notes: list[str]) -> int:
    """The llvm-symbolizer processes a trace's notes say naming its lines started (a
    debug vmlinux, addresses not in the line cache: the one fork it documents)."""
    found = [re.search(r"started (\d+) llvm-symbolizer process\(es\)", n) for n in notes]
    return sum(int(m[1]) for m in found if m)


def traced_blocks(tracer: Tracer, obj: BpfObject, where: Path, target: object) -> list[str]:
    """Three trace blocks of `body`; what each did beyond it (empty: nothing)."""
    extra = []
    for i in range(3):
        modules, before = set(sys.modules), counts(obj)
        with tracer.trace(target) as trace:
            body(where / f"d{i}")
        after, imported = counts(obj), set(sys.modules) - modules
        did = tuple(b - a for a, b in zip(before, after, strict=True))
        forks = symbolizer_forks(trace.notes)
        if did != (1, 1, 1 + forks) or imported:
            extra.append(
                f"block {i}: (mkdir, rmdir, fork) counted {did}, the body did {ONE_EACH}; "
                f"imported {sorted(imported)}; notes {trace.notes}"
            )
    return extra


@pytest.mark.parametrize("target", ["prog", "kfunc:vfs_write"])
def test_the_session_tracer_adds_no_mkdir_rmdir_or_fork(
    lbr: Tracer, counter: BpfObject, tmp_path: Path, target: str
) -> None:
    """The session's tracer was prepared in the `lbr` fixture, before the body."""
    what = counter.programs["own_mkdir"] if target == "prog" else target
    assert traced_blocks(lbr, counter, tmp_path, what) == []


BACKENDS = [("graph", "hardware"), ("lbr", "software")]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "pmu"), BACKENDS, ids=[b for b, _ in BACKENDS])
def test_a_prepared_tracer_adds_no_mkdir_rmdir_or_fork(
    counter: BpfObject, tmp_path: Path, backend: str, pmu: str
) -> None:
    """A tracer of its own, first used here: `prepare()` made its instance (graph)."""
    with Tracer(backend=backend, pmu=pmu) as tracer:
        if not tracer.available:
            pytest.fail(f"{backend} backend ({pmu}): {tracer.reason}")
        tracer.prepare()
        extra = traced_blocks(tracer, counter, tmp_path, counter.programs["own_rmdir"])
    assert extra == []


@pytest.mark.slow
def test_a_first_trace_without_prepare_says_what_it_did(counter: BpfObject, tmp_path: Path) -> None:
    """Unprepared, the graph backend's first trace probes and makes its instance in the
    traced process: the program counts it, and the trace's notes name it."""
    with Tracer(backend="graph") as tracer:
        before = counts(counter)
        with tracer.trace("kfunc:vfs_write") as trace:
            body(tmp_path / "d")
        mkdirs, rmdirs, _ = (b - a for a, b in zip(before, counts(counter), strict=True))
        # The probe's instance (made, removed), the session's (made), the body's.
        assert mkdirs >= 3 and rmdirs >= 2, (mkdirs, rmdirs)
        notes = "\n".join(trace.notes)
        assert "probed the graph backend first" in notes, notes
        assert "made a tracefs instance (mkdir" in notes, notes
        # The second trace has nothing left to set up.
        before = counts(counter)
        with tracer.trace("kfunc:vfs_write") as trace:
            body(tmp_path / "e")
        did = tuple(b - a for a, b in zip(before, counts(counter), strict=True))
        assert did == (1, 1, 1 + symbolizer_forks(trace.notes)), (did, trace.notes)
        assert not any("tracefs instance" in n for n in trace.notes), trace.notes
