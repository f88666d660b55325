"""The instructions each program was loaded from, as its object wrote them.

The kernel keeps a program's translated instructions, not the object's: the `bpf`
fixture (`pytest_lbr.bpf.harness`) registers libbpf's after each load, and helper
alignment (`programs.helper_calls`) reads them to say what became of each call
the C wrote. A program loaded elsewhere (bcc, bpftool) has none.
"""

from __future__ import annotations

import threading

__all__ = ["loaded_from", "remember_loaded_from", "remember_written", "written_insns"]

#: prog id -> the object's instructions (libbpf's, after load).
_written: dict[int, bytes] = {}
#: prog id -> (the object file, the program's function name in it).
_objects: dict[int, tuple[str, str]] = {}
_written_lock = threading.Lock()


def remember_written(prog_id: int, insns: bytes) -> None:
    """Keep the instructions program `prog_id` was loaded from (as libbpf passed them)."""
    with _written_lock:
        _written[prog_id] = insns


def written_insns(prog_id: int) -> bytes | None:
    """The instructions remembered for `prog_id`, or None."""
    with _written_lock:
        return _written.get(prog_id)


def remember_loaded_from(prog_id: int, path: str, function: str) -> None:
    """Keep which object file program `prog_id` was loaded from, and its function
    there (coverage reads the object's DWARF for inlined calls' lines)."""
    with _written_lock:
        _objects[prog_id] = (path, function)


def loaded_from(prog_id: int) -> tuple[str, str] | None:
    """(object file, function name) remembered for `prog_id`, or None."""
    with _written_lock:
        return _objects.get(prog_id)
