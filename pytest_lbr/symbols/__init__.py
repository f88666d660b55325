"""Addresses -> `symbol+0xoff (file:line)` with inlined frames, for kernel and BPF code.

`get_symbolizer(vmlinux)` gives the process-wide `Symbolizer` of a debug vmlinux
path (auto-discovered without one): kernel symbols from /proc/kallsyms, BPF
programs from their own line info, and kernel file:line from a debug vmlinux
whose build-id matches the running kernel (else no lines, and `vmlinux_status`
says why).

Each module's test mirrors it under tests/symbols/, but for `elf.py` (user
binaries' symbols and lines) and `frame.py` (one DWARF frame). Tested by
tests/test_user_probes.py, tests/test_fuzz_elf.py, tests/symbols/test_dwarf.py and
test_cache.py.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Collection, Iterable

from ..bpf.libbpf import BpfError
from ..bytecode.flow import without_constants
from ..kernel.helpers import xlated_insns
from ..model import InlineFrame, Location, ProgramCalls
from ..programs.helper_calls import HelperNames
from ..programs.lines import BpfPrograms, ProgramLines
from ..programs.written import WrittenPrograms
from .frame import Frame
from .kallsyms import KALLSYMS, KernelSymbols, Symbol, live_kallsyms
from .vmlinux import VmlinuxError, VmlinuxLines, find_vmlinux

__all__ = [
    "Symbolizer",
    "flush_symbolizers",
    "frames_to_location",
    "get_symbolizer",
    "processes_started",
]


def frames_to_location(
    addr: int, symbol: str | None, offset: int, module: str | None, frames: tuple[Frame, ...]
) -> Location:
    """A Location from llvm-symbolizer-style frames (innermost first).

    file:line is where the instruction is (the innermost frame). Each inlined
    function becomes an InlineFrame carrying its call site in its caller, so
    no line of the chain is lost.
    """
    if not frames:
        return Location(addr, symbol, offset, module)
    inlined = tuple(
        InlineFrame(frames[i].function or "??", frames[i + 1].file, frames[i + 1].line)
        for i in range(len(frames) - 1)
    )
    return Location(addr, symbol, offset, module, frames[0].file, frames[0].line, inlined)


class Symbolizer:
    """Symbolizes live kernel and BPF addresses of the running system."""

    def __init__(self, vmlinux: str | None = None, kallsyms: str = "/proc/kallsyms") -> None:
        self._lock = threading.Lock()
        # The running kernel's table is shared with the call-site searches.
        self.kallsyms = live_kallsyms() if kallsyms == KALLSYMS else KernelSymbols(kallsyms)
        self.bpf = BpfPrograms(self._describe)
        self._helpers: HelperNames | None = None
        #: Helper calls described, by the program's shape (`_shape`), newest last.
        self._described: dict[tuple[object, ...], ProgramCalls] = {}
        #: Programs whose helper calls were worked out (not taken from `_described`).
        self.described = 0
        #: Core kernel addresses named so far, by address (`_locate_many`).
        self._core: dict[int, Location] = {}
        #: How many core kernel addresses were named (not taken from `_core`).
        self.core_named = 0
        self._bpf_read = False
        self._checked: set[tuple[str, int]] = set()
        self.lines: VmlinuxLines | None = None
        self.kaslr_offset = 0
        path, status = find_vmlinux(vmlinux)
        if path is not None:
            try:
                self.lines = VmlinuxLines(path)
                elf_stext = self.lines.symbol_address("_stext")
                live_stext = self.kallsyms.address_of("_stext")
                if elf_stext is not None and live_stext is not None:
                    self.kaslr_offset = live_stext - elf_stext
            except VmlinuxError as exc:
                path, status = None, str(exc)
        if not self.kallsyms.readable:
            status += "; /proc/kallsyms hides addresses (need root): no kernel symbols"
        self._status = status

    @property
    def vmlinux_status(self) -> str:
        """What debug vmlinux is used, or why kernel addresses get no file:line."""
        return self._status

    def locate(self, addr: int, written: WrittenPrograms | None = None) -> Location:
        """Symbolize one live address (`written`: as `locate_many`)."""
        return self.locate_many([addr], written=written)[addr]

    def locate_many(
        self,
        addrs: Iterable[int],
        recorded_by: float | None = None,
        named: Collection[int] = (),
        written: WrittenPrograms | None = None,
    ) -> dict[int, Location]:
        """Symbolize many live addresses; kernel lines are looked up in one batch.

        `recorded_by`: a `time.monotonic()` by which every address was recorded
        (a trace's end). A kernel symbol table read after it knows all they were,
        so it is not read again for them. `named`: addresses the caller has a name
        for already (the function tracer's): JIT code no live program holds (a
        trampoline) is left unnamed among them (`Location(addr)`) rather than
        named by a re-read of the whole of kallsyms, or by a stale one. `written`:
        the instructions the caller's loader loaded its programs from (`BpfLoader.written`):
        a BPF program's helper calls are told as its C wrote them where the book
        has it, else from its translated instructions alone.
        """
        with self._lock:
            return self._locate_many(set(addrs), recorded_by, named, written)

    def _locate_many(
        self,
        addrs: set[int],
        recorded_by: float | None,
        named: Collection[int] = (),
        written: WrittenPrograms | None = None,
    ) -> dict[int, Location]:
        # The core kernel's names and lines never change while it runs: each address
        # is named once (before the helper step below, which is kept as it was).
        out: dict[int, Location] = {a: loc for a in addrs if (loc := self._core.get(a))}
        addrs = addrs.difference(out)
        core: list[int] = []
        done: list[int] = []  # core kernel addresses named now
        bpf_refreshed = False
        reloaded = recorded_by is not None and self.kallsyms.read_at >= recorded_by
        if self._bpf_read and any(not self.kallsyms.in_core(a) for a in addrs):
            # BPF programs come and go, and a new one may be JITed where an unloaded
            # one was: learn where the live programs are once per batch, so a stale
            # table never names the new program after the old one.
            self._refresh_bpf()
            bpf_refreshed = True
        in_core = self.kallsyms.in_core  # no program's code is there: not looked up
        for addr in sorted(addrs):
            loc = self._locate_bpf(addr, written) if self._bpf_read and not in_core(addr) else None
            if loc is None:
                sym = self.kallsyms.lookup(addr)
                if addr in named and not reloaded and self._in_jit_space(addr, sym):
                    if not bpf_refreshed:
                        self._refresh_bpf()
                        bpf_refreshed = True
                    out[addr] = self._locate_bpf(addr, written) or Location(addr)
                    continue
                if not (bpf_refreshed and reloaded) and self._looks_new(addr, sym):
                    # Loaded after we read program info: read it again. A program's
                    # own info names it, so kallsyms is read again (the whole file)
                    # only for JIT code no live program holds.
                    if not bpf_refreshed:
                        self._refresh_bpf()
                        bpf_refreshed = True
                        loc = self._locate_bpf(addr, written)
                    if loc is None and not reloaded:
                        reloaded = True
                        self.kallsyms.reload()
                        sym = self.kallsyms.lookup(addr)
                if loc is None and sym is not None and sym.module == "bpf":
                    loc = self._locate_bpf(addr, written) if self._bpf_read else None
            if loc is not None:
                out[addr] = loc
                continue
            if in_core(addr):
                done.append(addr)
            if sym is None:
                out[addr] = Location(addr)
            else:
                out[addr] = Location(addr, sym.name, sym.offset, sym.module)
                if sym.module is None and self.lines is not None:
                    core.append(addr)
        if core and self.lines is not None:
            found = self.lines.lookup(a - self.kaslr_offset for a in core)
            for a in core:
                loc = out[a]
                frames = found.get(a - self.kaslr_offset, ())
                out[a] = frames_to_location(a, loc.symbol, loc.offset, loc.module, frames)
        if len(self._core) + len(done) > _MAX_CORE:  # a long session's every address
            self._core.clear()
        self._core.update((a, out[a]) for a in done)
        self.core_named += len(done)
        if self._helpers is not None:
            # A helper's own implementation is that helper for every caller; what a
            # program's call of a map's function stands for is that program's own
            # fact, named per call (`tracer.add_source_lines`).
            protos = self._helpers.protos
            for a, loc in out.items():
                if loc.module is None and loc.symbol in protos:
                    out[a] = dataclasses.replace(loc, helper=protos[loc.symbol])
        return out

    def _describe(
        self, fd: int, prog: ProgramLines, written: WrittenPrograms | None
    ) -> ProgramCalls:
        """Helper calls of a BPF program, as written where the book `written` has it
        (kernel-wide facts read on first use)."""
        if self._helpers is None:
            protos = self.kallsyms.protos
            if protos is None:  # a table read from a file: the live one has them
                try:
                    protos = live_kallsyms().protos
                except OSError:
                    protos = None
            self._helpers = HelperNames(
                self._function_at,
                self.kallsyms.address_of("__bpf_call_base"),
                self._vmlinux_data_address,
                protos or [],
            )
        names, functions = (prog.name, prog.kernel_name), tuple(f.name for f in prog.funcs)
        shape = _shape(fd, prog.prog_id, names, functions, written)
        known = self._described.pop(shape, None) if shape is not None else None
        if shape is not None and known is not None:
            self._described[shape] = known  # the newest last: the oldest goes first
            return dataclasses.replace(known, prog_id=prog.prog_id)
        calls = self._helpers.describe(fd, prog.prog_id, names, list(functions), written)
        self.described += 1
        if shape is not None:
            self._described[shape] = calls
            if len(self._described) > _MAX_DESCRIBED:
                del self._described[next(iter(self._described))]
        return calls

    def _vmlinux_data_address(self, name: str) -> int | None:
        """A symbol's live address from the debug vmlinux (None without one)."""
        if self.lines is None:
            return None
        addr = self.lines.symbol_address(name)
        return addr + self.kaslr_offset if addr else None

    def _function_at(self, addr: int) -> str | None:
        sym = self.kallsyms.lookup(addr)
        return sym.name if sym is not None and sym.offset == 0 else None

    @property
    def helper_status(self) -> str:
        """Why helper implementations are unknown ("" when known or not yet needed)."""
        return self._helpers.status if self._helpers is not None else ""

    def _in_jit_space(self, addr: int, sym: Symbol | None) -> bool:
        """Outside the core kernel and its modules: BPF programs and trampolines,
        where kallsyms as last read may be out of date."""
        if self.kallsyms.in_core(addr):
            return False
        return sym is None or sym.module in (None, "bpf")

    def _looks_new(self, addr: int, sym: Symbol | None) -> bool:
        """True for a BPF program we have no line table for, or code past every symbol."""
        if sym is not None and sym.name.startswith("bpf_prog_"):
            key: tuple[str, int] = (sym.name, addr - sym.offset)
        elif self.kallsyms.in_core(addr) or (sym is not None and sym.module not in (None, "bpf")):
            return False
        else:
            # Outside the core kernel and not in a module: JIT space (BPF programs,
            # trampolines), where kallsyms as read may be out of date.
            key = ("", addr >> 12)
        # Each unknown program or page costs one re-read, not one per address.
        if key in self._checked:
            return False
        self._checked.add(key)
        return True

    def _refresh_bpf(self) -> None:
        try:
            self.bpf.refresh()
        except OSError:  # no libbpf, no privileges: BPF addresses stay unnamed
            pass
        self._bpf_read = True

    def _locate_bpf(self, addr: int, written: WrittenPrograms | None) -> Location | None:
        return self.bpf.locate(addr, written)


#: Programs' helper-call descriptions a symbolizer keeps: a long session loads many.
_MAX_DESCRIBED = 256
#: Core kernel addresses a symbolizer keeps named (a trace names a few hundred).
_MAX_CORE = 1 << 16


def _shape(
    fd: int,
    prog_id: int,
    names: tuple[str, str],
    functions: tuple[str, ...],
    written: WrittenPrograms | None,
) -> tuple[object, ...] | None:
    """What a program's helper calls are worked out from (`HelperNames.describe`): its
    names, its functions, its translated instructions and those it was loaded from,
    each without the values of its 64-bit loads (a map's id or address, new at each
    load: nothing a call is read from; those it was loaded from as the book `written`
    has them, else none). A program loaded again (a test's fixture) has the same
    shape, and so the same calls; None where its instructions are unreadable."""
    try:
        xlated = xlated_insns(fd)
    except BpfError:
        return None
    insns = written.insns(prog_id) if written is not None else None
    loaded = None if insns is None else without_constants(insns)
    return (names, functions, without_constants(xlated), loaded)


_symbolizers: dict[str | None, Symbolizer] = {}
_symbolizers_lock = threading.Lock()


def get_symbolizer(vmlinux: str | None = None) -> Symbolizer:
    """The process-wide Symbolizer of `vmlinux` (one per path), created on first use.

    Without a path, the debug vmlinux is auto-discovered (`find_vmlinux`). A caller
    with its own path (the pytest session's --lbr-vmlinux) passes it every time:
    there is no process-wide default to set.
    """
    with _symbolizers_lock:
        sym = _symbolizers.get(vmlinux)
        if sym is None:
            sym = _symbolizers[vmlinux] = Symbolizer(vmlinux)
        return sym


def processes_started(vmlinux: str | None = None) -> int:
    """The llvm-symbolizer processes the Symbolizer of `vmlinux` has started so far
    (0 where there is none yet: none is created here)."""
    with _symbolizers_lock:
        sym = _symbolizers.get(vmlinux)
    return sym.lines.processes_started if sym is not None and sym.lines is not None else 0


def flush_symbolizers() -> None:
    """Save what the process's symbolizers have looked up and not yet written to
    the line cache (they save at most every few seconds; the pytest plugin calls
    this when a session ends)."""
    with _symbolizers_lock:
        for sym in _symbolizers.values():
            if sym.lines is not None:
                sym.lines.flush()
