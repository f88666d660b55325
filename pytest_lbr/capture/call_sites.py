"""Where a function calls another, read from live code: the caller of a function
the function tracer cannot patch.

Some functions leave no record of their own: BPF helpers in
kernel/trace/bpf_trace.c (`bpf_probe_read_kernel`, `bpf_trace_printk`,
`bpf_seq_write`: that directory is built without -pg, kernel/trace/Makefile),
and notrace code such as an out-of-line copy of an `inline` function
(`htab_lock_bucket`). They show only as the parent of the calls they make.
`graph.hits` gives such a function the innermost frame running at that moment
as its caller, and asks `CallSites` where in that caller's code a call
instruction targets it. The answer comes from the code itself (the JIT image of
a BPF program, kernel text through /proc/kcore, disassembled with capstone), so
a caller whose code holds no such call stays unknown: then something unseen
between them made the call.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pytest_lbr.kernel.machine import machine

if TYPE_CHECKING:
    from pytest_lbr.symbols.kallsyms import KernelSymbols

__all__ = ["CallSite", "CallSites", "call_sites", "calls_in", "calls_of", "own_code"]

#: (the caller's name, its start address, the call's return address).
CallSite = tuple[str, int, int]
#: Functions read at most this long (kallsyms bounds them; a larger span holds a gap).
_MAX_FUNCTION = 1 << 16
#: x86-64 call-depth tracking (Linux kernel commit 5d8213864ade ("x86/retbleed: Add
#: SKL return thunk") (in v6.2)) makes direct calls go to the 16 bytes of padding
#: before a function: such a call still calls it.
_PADDING = 16
#: Programs' extents kept (`CallSites.learn`): the newest; a session loads many.
_MAX_LEARNED = 4096
#: A BPF trampoline's kallsyms name. Its image is at most a page: 6.1 gives each one
#: page (bpf_tramp_image_alloc()), and since Linux kernel commit 26ef208c209a ("bpf:
#: Use arch_bpf_trampoline_size") (in v6.8) a larger one is refused (-E2BIG).
_TRAMPOLINE = "bpf_trampoline_"


class CallSites:
    """Finds the call instructions of one function that target another (cached by
    the caller's name and address: a JIT image freed and reused has a new name).

    Reading needs root (/proc/kallsyms addresses, /proc/kcore); where either is
    refused, every answer is None.
    """

    def __init__(self) -> None:
        self._symbols: KernelSymbols | None = None
        self._broken = False
        #: Functions kallsyms did not list as asked even after a reload: asked again
        #: (a trace asks per record), they are not read again (the whole file).
        self._unknown: set[tuple[str | None, int]] = set()
        #: `through` answers, by (caller, its start, callee): each is a search of every
        #: function the caller calls.
        self._through: dict[tuple[str | None, int, int], tuple[CallSite, CallSite] | None] = {}
        #: JIT images the caller described (`learn`): start -> (name, size).
        self._learned: dict[int, tuple[str, int]] = {}
        #: Calls of JIT code (BPF programs, trampolines) by (start, its bytes' digest):
        #: see `_calls`.
        self._jit_calls: dict[tuple[int, bytes], list[tuple[int, int]]] = {}
        #: Per thread, inside `one_reading`: JIT code read so far, by (start, size).
        self._reading = threading.local()

    def learn(self, name: str, start: int, size: int) -> None:
        """A function whose name and extent the caller knows from elsewhere (a BPF
        program's own info): asked about, it is not looked up in kallsyms, which
        lists a program loaded since the last read only after reading it all again."""
        self._learned.pop(start, None)  # re-learned: now the newest
        self._learned[start] = (name, size)
        if len(self._learned) > _MAX_LEARNED:  # a long session's programs: forget the oldest
            del self._learned[next(iter(self._learned))]

    def __call__(
        self, caller: str | None, caller_start: int, callee_addr: int, after: int = 0
    ) -> CallSite | None:
        """Where function `caller` (None: whatever kallsyms names there), starting at
        `caller_start`, calls `callee_addr`: the first call at or after address
        `after` (the caller's previous call site, for a caller that calls it from
        several places), else the first of all."""
        found = self._function(caller, caller_start)
        if found is None:
            return None
        name, size = found
        calls = self._calls(name, caller_start, size)
        sites = [ret for ret, target in calls if callee_addr - _PADDING <= target <= callee_addr]
        if not sites:
            return None
        later = [s for s in sites if s > after]
        return name, caller_start, (later or sites)[0]

    def through(
        self, caller: str | None, caller_start: int, callee_addr: int, after: int = 0
    ) -> tuple[CallSite, CallSite] | None:
        """Where `caller` calls a function whose code calls `callee_addr`, one
        unrecorded function between them (a notrace `preempt_schedule_common`
        between `__cond_resched` and `__schedule`): (the caller's call of it,
        its call of the callee). Calls at or after `after` are tried first."""
        key = (caller, caller_start, callee_addr)
        if key in self._through:
            return self._through[key]
        found = self._function(caller, caller_start)
        answer = None
        name, size = found if found is not None else ("", 0)
        calls = self._calls(name, caller_start, size) if found is not None else []
        for ret, target in sorted(calls, key=lambda c: (c[0] <= after, c[0])):
            middle = self._entry(target)
            if middle is None or middle[1] == callee_addr:
                continue
            inner = self(middle[0], middle[1], callee_addr)
            if inner is not None:
                answer = (name, caller_start, ret), inner
                break
        if self._in_core(caller_start):  # JIT code changes under its name: see `_calls`
            self._through[key] = answer
        return answer

    def _calls(self, name: str, start: int, size: int) -> list[tuple[int, int]]:
        """`calls_in`, kept by name and address only for the core kernel's text.
        JIT code changes under the same name and address: a program loaded again
        (same tag, same name) can land where it was with its subprograms elsewhere,
        and a direct tail call is a jump the kernel patches when a program array
        changes (x86-64). A stale jump made 6.1's tail call in examples/tail_loop
        read as a call. Its code is read each time (a few hundred bytes; once per
        trace inside `one_reading`) and its calls kept by what the bytes are."""
        if self._in_core(start):
            return calls_in(name, start, size)
        read: dict[tuple[int, int], bytes] | None = getattr(self._reading, "code", None)
        code = read.get((start, size)) if read is not None else None
        if code is None:
            code = _code(start, size)
            if read is not None:
                read[(start, size)] = code
        key = (start, hashlib.blake2b(code, digest_size=16).digest())
        found = self._jit_calls.get(key)
        if found is None:
            # A program's own image is loaded again at other addresses (`code_shapes`);
            # a trampoline's page holds its neighbours too, new at every trace.
            image = start in self._learned
            found = self._jit_calls[key] = calls_of(code, start, size, jit=image)
            if len(self._jit_calls) > _MAX_LEARNED:  # a long session: forget the oldest
                del self._jit_calls[next(iter(self._jit_calls))]
        return found

    @contextmanager
    def one_reading(self) -> Iterator[None]:
        """Inside, JIT code is read once (per thread): one trace's records are cut
        against one reading of it, read again at the next trace (see `_calls`)."""
        self._reading.code = {}
        try:
            yield
        finally:
            self._reading.code = None

    def _in_core(self, start: int) -> bool:
        """Whether `start` is the core kernel's text (what a program's own info
        described is JIT code: asked without reading kallsyms)."""
        if start in self._learned:
            return False
        syms = self._kallsyms()
        return syms is not None and syms.in_core(start)

    def _entry(self, target: int) -> tuple[str, int] | None:
        """(name, start) of the function a call to `target` enters: the function
        at `target`, or after its padding (`_PADDING`: `__pfx_` symbols, 6.12)."""
        syms = self._kallsyms()
        if syms is None:
            return None
        for addr in (target, target + _PADDING):
            sym = syms.lookup(addr)
            if sym is not None and sym.offset == 0 and not sym.name.startswith("__pfx_"):
                return sym.name, addr
        return None

    def _function(self, name: str | None, start: int) -> tuple[str, int] | None:
        """(name, size) of the function at `start`, as kallsyms lists it now."""
        learned = self._learned.get(start)
        # By name only: a freed image's address may hold another program now.
        if learned is not None and name == learned[0]:
            return learned
        syms = self._kallsyms()
        if syms is None or (name, start) in self._unknown:
            return None
        if name is not None and name.startswith(_TRAMPOLINE):
            # Each newly hooked program gets a trampoline: named by the record that
            # asks, and bounded by its page, it needs no re-read of kallsyms (the
            # whole file, most of a trace's cost under emulation: issue 54).
            sym, end = syms.lookup(start), syms.end_of(start)
            if sym is not None and sym.offset == 0 and sym.name == name and end:
                return name, min(end - start, mmap.PAGESIZE)
            return name, mmap.PAGESIZE
        for attempt in range(2):
            sym = syms.lookup(start)
            end = syms.end_of(start)
            if sym is not None and sym.offset == 0 and name in (None, sym.name) and end:
                # kallsyms has no sizes: a BPF image last in its pack (6.1's task
                # iterator) is followed by a gap; past its end lies no call of it.
                return sym.name, min(end - start, _MAX_FUNCTION)
            if attempt == 0:  # a program loaded since kallsyms was read
                try:
                    syms.reload()
                except OSError:
                    return None
        self._unknown.add((name, start))
        return None

    def kallsyms(self) -> KernelSymbols | None:
        """The kallsyms table it reads (None: unreadable here)."""
        return self._kallsyms()

    def _kallsyms(self) -> KernelSymbols | None:
        if self._symbols is None and not self._broken:
            from pytest_lbr.symbols.kallsyms import live_kallsyms

            try:
                self._symbols = live_kallsyms()
            except OSError:
                self._broken = True
            if self._symbols is not None and not self._symbols.readable:
                self._symbols, self._broken = None, True
        return self._symbols


@functools.lru_cache(maxsize=4096)
def calls_in(name: str, start: int, size: int) -> list[tuple[int, int]]:
    """(return address, target) of each direct call in function `name`'s live code,
    and (jump address, target) of each jump out of it (a tail call). Kept by name
    and address: for code that does not change (the core kernel's text)."""
    return calls_of(_code(start, size), start, size)


def _code(start: int, size: int) -> bytes:
    """The live code of a function; empty where it cannot be read."""
    from pytest_lbr.symbols.disasm import read_kernel

    try:
        code = read_kernel(start, size)
    except (OSError, ValueError):
        return b""
    return own_code(code) if machine().name == "x86_64" else code


def own_code(code: bytes) -> bytes:
    """x86-64 code read from a function's start up to its filler: int3 pads functions
    and fills what a BPF pack's images leave free (no call is there, and each byte
    decodes as one). A trampoline is read to the end of its page (kallsyms lists none
    newer than its last read), which may hold the pack's next images after that
    filler: they are not its code."""
    end = code.find(_FILLER)
    return (code if end < 0 else code[:end]).rstrip(b"\xcc")


#: int3s no function's code holds in a row (one follows a `ret` against
#: straight-line speculation): the filler after an image.
_FILLER = b"\xcc" * 16


def calls_of(code: bytes, start: int, size: int, *, jit: bool = False) -> list[tuple[int, int]]:
    """`calls_in` of `code`, a function of `size` bytes loaded at `start` (`jit`:
    JIT code, see `disassemble`)."""
    from pytest_lbr.symbols.disasm import call_targets, disassemble, jumps_out

    arch = machine().name
    # x86-64 needs only the calls and jumps themselves; arm64 also the mov/movk
    # that build a `blr` target (`call_targets`).
    insns = disassemble(code, start, arch, _CALLS_AND_JUMPS.get(arch), jit=jit)
    size_at = {i.addr: i.size for i in insns}
    out = [(at + size_at[at], target) for at, target in call_targets(insns, arch)]
    # A tail call: the jumped-to function returns to this one's caller, but this one
    # entered it: the site is the jump itself (the address after it may be the next
    # function's).
    return out + jumps_out(insns, start, start + size)


_CALLS_AND_JUMPS = {"x86_64": frozenset({"call", "jmp"})}

#: One per process: kallsyms is read once, and again only when a name is new.
call_sites = CallSites()
