"""The instructions each program was loaded from, as its object wrote them.

The kernel keeps a program's translated instructions, not the object's. A
`WrittenPrograms` book holds libbpf's, by program id, for the programs one loader
loaded: each `BpfLoader` (`pytest_lbr.bpf.harness`) owns one (`loader.written`) and
adds to it after each load, and whoever reads it is handed it: the `Tracer`
(`Tracer(written=...)`) passes it to helper alignment (`programs.helper_calls`), which
says what became of each call the C wrote, and to coverage, which reads the object's
DWARF. A program loaded elsewhere (bcc, bpftool, a loader the reader was not given)
is in no book.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["Written", "WrittenPrograms"]


@dataclass(frozen=True)
class Written:
    """What one program was loaded from."""

    #: The object's instructions (libbpf's, after load), or what runs in their place
    #: (exact coverage's counted program); None: libbpf kept none.
    insns: bytes | None
    #: The object file (None: not loaded from a file).
    object_path: str | None
    #: The program's function name in it.
    function: str


class WrittenPrograms:
    """prog id -> `Written`, for the programs one loader loaded (thread-safe)."""

    def __init__(self) -> None:
        self._programs: dict[int, Written] = {}
        self._lock = threading.Lock()

    def add(self, prog_id: int, written: Written) -> None:
        """Keep what program `prog_id` was loaded from."""
        with self._lock:
            self._programs[prog_id] = written

    def get(self, prog_id: int) -> Written | None:
        """What program `prog_id` was loaded from, or None."""
        with self._lock:
            return self._programs.get(prog_id)

    def insns(self, prog_id: int) -> bytes | None:
        """The instructions `prog_id` was loaded from (as libbpf passed them), or None."""
        found = self.get(prog_id)
        return found.insns if found is not None else None

    def loaded_from(self, prog_id: int) -> tuple[str, str] | None:
        """(object file, function name) of `prog_id`, or None (coverage reads the
        object's DWARF for inlined calls' lines)."""
        found = self.get(prog_id)
        if found is None or found.object_path is None:
            return None
        return found.object_path, found.function

    def __contains__(self, prog_id: object) -> bool:
        with self._lock:
            return prog_id in self._programs

    def __len__(self) -> int:
        with self._lock:
            return len(self._programs)

    def __repr__(self) -> str:
        return f"<WrittenPrograms of {len(self)} program(s)>"
