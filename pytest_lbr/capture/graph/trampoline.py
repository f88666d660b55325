"""What BPF trampolines leave in the function tracer's records (pure: no I/O).

A tracing program (fentry, fexit, lsm, an iterator under fexit) runs from a
trampoline whose helpers (`__bpf_prog_enter*`, `__bpf_prog_exit*`,
`__bpf_tramp_*`) are notrace: only what they call names them, as the parent.
`hits.py` asks here which records are the graph backend's own fexit hooks
(dropped) and which parents are trampoline code (they end a program's run).
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import re
from collections.abc import Iterable

from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.noise import EXIT_HOOK_FRAMES

__all__ = ["trampoline_frame", "without_exit_hooks"]

#: `EXIT_HOOK_FRAMES` compiled: each, and any of them.
_HOOK_FRAME_RES = {k: re.compile(fnmatch.translate(p)) for k, p in EXIT_HOOK_FRAMES.items()}
_HOOK_FRAME_RE = re.compile("|".join(f"(?:{r.pattern})" for r in _HOOK_FRAME_RES.values()))


def without_exit_hooks(
    records: list[FunctionRecord | EventRecord], hook_times: Iterable[int]
) -> list[FunctionRecord | EventRecord]:
    """One thread's function records without those of our fexit hooks (`EXIT_HOOK_FRAMES`).

    The trampoline's helpers are notrace: only what they call names them, as the
    parent. A hook runs from the first record called by `__bpf_prog_enter*` to
    the last one called by the next `__bpf_prog_exit*` (and what those called);
    it is ours when one of `hook_times` (when our fexit program ran: its records'
    bpf_ktime_get_ns) falls in between, so a user's fentry/fexit program stays.
    Records called by `__bpf_tramp_enter`/`exit` (and their callees) are dropped
    wherever they are. Cut by time, not by name: the tracer program's kallsyms
    name may be the traced program's, and some of what it calls is notrace
    (bpf_ringbuf_commit), so its callees name a parent never entered.
    """
    funcs = [r if isinstance(r, FunctionRecord) else None for r in records]
    if not any(r is not None and r.parent and _HOOK_FRAME_RE.match(r.parent) for r in funcs):
        return records  # no hook ran here (a live trace's usual poll)
    times = sorted(hook_times)
    drop = [False] * len(records)

    def called_by(r: FunctionRecord | None, key: str) -> bool:
        return r is not None and _HOOK_FRAME_RES[key].match(r.parent or "") is not None

    def drop_calls(start: int, key: str) -> int:
        """Drop the records from `start` on called by `key` or by what they entered."""
        entered: set[str] = set()
        i = start
        while i < len(records):
            r = funcs[i]
            if r is not None:
                if not (called_by(r, key) or r.parent in entered):
                    break
                entered.add(r.func)
                drop[i] = True
            i += 1
        return i

    i = 0
    while i < len(records):
        r = funcs[i]
        if called_by(r, "trampoline"):
            i = drop_calls(i, "trampoline")
            continue
        if r is not None and called_by(r, "enter"):
            end = next((j for j in range(i + 1, len(records)) if called_by(funcs[j], "exit")), None)
            # Another program entered before this one's exit runs inside it: our hook
            # on a user's fentry program runs within that program's own window, so
            # only the innermost window can be the hook's (else the user's program
            # went with it).
            k = i  # past this enter's own calls
            while k < len(records) and (funcs[k] is None or called_by(funcs[k], "enter")):
                k += 1
            inner = next((j for j in range(k, end or k) if called_by(funcs[j], "enter")), None)
            if inner is not None:
                i = inner
                continue
            if end is not None and _any_between(times, r.ts_ns, records[end].ts_ns):
                for j in range(i, end):
                    drop[j] = funcs[j] is not None
                i = drop_calls(end, "exit")
                continue
        i += 1
    return [r for r, gone in zip(records, drop, strict=True) if not gone]


def _any_between(times: list[int], lo: int, hi: int) -> bool:
    k = bisect.bisect_left(times, lo)
    return k < len(times) and times[k] <= hi


@functools.lru_cache(maxsize=1024)
def trampoline_frame(parent: str) -> bool:
    """Whether `parent` is BPF trampoline code (`EXIT_HOOK_FRAMES`, `bpf_trampoline_*`):
    what runs a tracing program (fentry, fexit, lsm, iter under fexit), not its work."""
    return _HOOK_FRAME_RE.match(parent) is not None or parent.startswith("bpf_trampoline_")
