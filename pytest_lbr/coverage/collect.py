"""Coverage of the programs a session traces: each finished trace read into a
`CoverageBook` while its programs are still loaded. Usable without pytest:

    collector = CoverageCollector()
    with tracer.trace(prog) as trace:
        prog.run(data=packet)
    collector.add(trace, written=loader.written)
    print("\\n".join(term_missing(collector.book.sorted())))
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable
from typing import Any

from pytest_lbr.coverage.book import CoverageBook
from pytest_lbr.coverage.code import ProgramCode
from pytest_lbr.model import Trace
from pytest_lbr.programs.written import WrittenPrograms

__all__ = ["CoverageCollector"]


class CoverageCollector:
    """Reads each traced program's code once (by program id) and adds every trace's
    runs to `book`. `every_branch`: LBR records hold every taken branch (no
    `--lbr-filter`). A program that cannot be read is named in `problems`."""

    def __init__(
        self,
        *,
        every_branch: bool = True,
        arch: str | None = None,
        counted: Container[int] = frozenset(),
    ) -> None:
        self.book = CoverageBook()
        #: Ids of programs running with counters (exact mode): their counters give
        #: their coverage, and their JIT code is not the program as written.
        self.counted = counted
        self.every_branch = every_branch
        self.arch = arch or os.uname().machine
        self.problems: list[str] = []
        #: By program id and the object file it was loaded from (None: not known).
        self._codes: dict[tuple[int, tuple[str, str] | None], ProgramCode | None] = {}

    def add(
        self,
        trace: Trace,
        targets: Iterable[Any] | None = None,
        context: str = "",
        written: WrittenPrograms | None = None,
    ) -> None:
        """Add `trace` (finished; its programs still loaded). `targets`: what was
        traced, as given to `lbr.trace` (default: the trace's own target specs);
        `context`: the test it belongs to (pytest's node id), whose runs the
        coverage keeps apart too (`ProgramCoverage.contexts`); `written`: the book
        of the loader of its programs (`BpfLoader.written`), whose object files
        tell the lines of their inlined calls."""
        found = self._target_programs(targets if targets is not None else trace.targets)
        ids = set(found.values())
        for hit in trace.hits:
            for b in hit.branches:
                for loc in (b.src, b.dst):
                    if loc.program is not None:
                        ids.add(loc.program.prog_id)
        found = {t: pid for t, pid in found.items() if pid not in self.counted}
        ids = {pid for pid in ids if pid not in self.counted}
        codes = {pid: code for pid in ids if (code := self._code(pid, written)) is not None}
        self.book.add_trace(trace, codes, found, every_branch=self.every_branch, context=context)

    def _target_programs(self, targets: Iterable[Any]) -> dict[str, int]:
        """Target spec -> program id, for the targets that are programs."""
        from pytest_lbr.programs.find import resolve_program
        from pytest_lbr.targets import TargetError, parse_target

        out: dict[str, int] = {}
        for t in targets:
            try:
                target = parse_target(t)
                if not target.is_program:
                    continue
                with resolve_program(target) as ref:
                    out[target.spec] = ref.id
            except TargetError as exc:
                self._problem(f"coverage: {exc}")
        return out

    def _code(self, prog_id: int, written: WrittenPrograms | None) -> ProgramCode | None:
        key = (prog_id, written.loaded_from(prog_id) if written is not None else None)
        if key not in self._codes:
            from pytest_lbr.bpf.libbpf import BpfError
            from pytest_lbr.coverage.program import read_code
            from pytest_lbr.programs.info import open_program

            try:
                fd = open_program(prog_id)
                try:
                    self._codes[key] = read_code(fd, self.arch, written)
                finally:
                    os.close(fd)
            except (BpfError, OSError) as exc:
                self._codes[key] = None
                self._problem(f"coverage: cannot read BPF program {prog_id}: {exc}")
        return self._codes[key]

    def _problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)
