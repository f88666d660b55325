"""The kernel functions a system-wide graph trace records: its targets' calls, not the machine's.

With an empty ``set_ftrace_filter`` the function tracer records every function
every task enters. That is right for one process (its pid list keeps the rest
out) but a system-wide trace of a program then records the whole machine: in
the 6.1 guest, a process started during a veth XDP test wrote 886,736 records
for 3 packets and lost 42,775 of them.

Only what a target calls can belong to its hits. So a system-wide trace of
programs and kernel functions narrows the tracer to a call graph read from the
running kernel:

* a program's roots are the kernel functions its JITed image calls directly
  (helpers, kfuncs, the map functions the verifier rewrote a helper call into),
  found by disassembling the image (`pytest_lbr.symbols.disasm.call_targets`);
* a kernel function target is its own root;
* then the file-local (static) functions each of those calls or jumps to
  directly, read from the live kernel text (/proc/kcore), down to
  `NARROW_DEPTH` calls below the roots.

Global functions below the roots are left out: a lock or an allocator
(`_raw_spin_lock` under `htab_map_update_elem`) runs everywhere on the machine,
and in the 6.12 guest those two were 32,000 of the 33,000 records of a veth
test whose process start they recorded (bench/system_scope.py). A static
function is called only from its own file. Calls through function pointers and
anything deeper are not recorded either: the trace's note says so.
`NARROW_DEPTH` was chosen by measurement (docs/guide.md, "System scope under load").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pytest_lbr.bpf.libbpf import BpfError
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.kernel.functions import filter_functions_text, matching_functions
from pytest_lbr.kernel.machine import machine
from pytest_lbr.kernel.tracefs import TRACEFS_NOT_MOUNTED, find_tracefs
from pytest_lbr.programs.find import resolve_program
from pytest_lbr.programs.info import program_details
from pytest_lbr.programs.lines import jited_image
from pytest_lbr.symbols.disasm import call_targets, disassemble, jumps_out, read_kernel
from pytest_lbr.symbols.kallsyms import KernelSymbols, live_kallsyms
from pytest_lbr.targets import Target

__all__ = [
    "NARROW_DEPTH",
    "NARROW_LIMIT",
    "Narrowing",
    "callee_closure",
    "image_roots",
    "narrowing",
]

#: Calls below a root that a narrowed trace still records (roots are depth 0).
NARROW_DEPTH = 2
#: At most this many functions: each one patched is a call site the trace slows
#: down (they go into set_ftrace_filter by index: `Instance.set_function_filter`).
NARROW_LIMIT = 2000
#: Longest function body read from kcore (kallsyms has no sizes: the next symbol ends it).
_MAX_BODY = 1 << 16


@dataclass(frozen=True)
class Narrowing:
    """The functions a narrowed trace records, and what it leaves out, for its note."""

    functions: tuple[str, ...]
    depth: int
    #: Functions found but left out: over `NARROW_LIMIT`, or not traceable.
    truncated: bool = False

    def note(self, what: str) -> str:
        """The trace note: what was recorded instead of the whole machine."""
        more = f", the first {NARROW_LIMIT} of them" if self.truncated else ""
        return (
            f'scope="system": the function tracer recorded only the {len(self.functions)} '
            f"traceable functions {what} calls and the static functions under them, "
            f"{self.depth} call(s) deep{more} (set_ftrace_filter), not every function of "
            "the machine; global functions under them (locks, allocators), calls deeper "
            "and calls through function pointers are not in its hits"
        )


def image_roots(code: bytes, functions: Sequence[tuple[int, int]], arch: str) -> set[int]:
    """Kernel addresses a JITed program image calls directly.

    `code` is the whole image (jited_prog_insns); `functions` the (start, size)
    of its functions in jited_ksyms order, the order the image concatenates them.
    """
    roots: set[int] = set()
    pos = 0
    for start, size in functions:
        insns = disassemble(code[pos : pos + size], start, arch, jit=True)
        roots.update(target for _, target in call_targets(insns, arch))
        pos += size
    return roots


def callee_closure(
    roots: Iterable[int],
    symbols: KernelSymbols,
    read: Callable[[int, int], bytes],
    arch: str,
    traceable: Callable[[str], bool],
    depth: int = NARROW_DEPTH,
    limit: int = NARROW_LIMIT,
) -> Narrowing:
    """The traceable functions at `roots` and the static ones under them, `depth` deep.

    `read(addr, size)` reads live kernel text; `traceable(name)` says whether
    the function tracer can record a function (available_filter_functions).
    Below the roots only file-local functions (`KernelSymbols.is_local`) are
    kept and followed. Functions are listed breadth first, so a cut at `limit`
    drops the deepest.
    """
    found: dict[str, None] = {}
    truncated = False
    seen: set[int] = set()
    level = set(roots)
    rootlike = set(roots)  # roots, and what stands in for a root the tracer cannot patch
    for d in range(depth + 1):
        following: set[int] = set()
        standing_in: set[int] = set()
        for addr in sorted(level - seen):
            seen.add(addr)
            sym = symbols.lookup(addr)
            if sym is None or sym.offset:
                continue  # not a function's start: a thunk or a label
            patched = traceable(sym.name)
            if patched:
                if len(found) >= limit:
                    truncated = True
                    continue
                found[sym.name] = None
            if d == depth:
                continue
            end = min(symbols.end_of(addr) or addr + _MAX_BODY, addr + _MAX_BODY)
            try:
                insns = disassemble(read(addr, end - addr), addr, arch)
            except OSError:
                continue
            callees = {t for _, t in call_targets(insns, arch)}
            callees.update(t for _, t in jumps_out(insns, addr, end))
            following |= callees
            if addr in rootlike and not patched:
                # A helper the tracer cannot patch (bpf_trace_printk: kernel/trace is
                # built without -pg) shows only through its callees, global ones too
                # (bpf_bprintf_prepare): they stand in for it as roots.
                standing_in |= callees
        level = {a for a in following if symbols.in_core(a) and symbols.is_local(a)}
        level |= {a for a in standing_in if symbols.in_core(a)}
        rootlike = standing_in
    return Narrowing(tuple(found), depth, truncated)


def narrowing(targets: Sequence[Target]) -> Narrowing:
    """The call graph under `targets` (programs and kernel functions), read from
    the running kernel (OSError or CaptureError when it cannot be read)."""

    root = find_tracefs()
    if root is None:
        raise CaptureError(TRACEFS_NOT_MOUNTED)
    available = filter_functions_text(root)
    symbols = _kernel_symbols()
    arch = machine().name
    roots: set[int] = set()
    for t in targets:
        if t.is_program:
            with resolve_program(t) as ref:
                try:
                    _, code = jited_image(ref.fd)
                    functions = program_details(ref.fd).functions
                except BpfError as exc:
                    raise CaptureError(f"{t.spec}: {exc}") from None
            roots |= image_roots(code, functions, arch)
        else:
            assert t.function is not None
            for name in matching_functions(available, t.function, modules=False):
                addr = symbols.address_of(name)
                if addr is not None:
                    roots.add(addr)
    key = (frozenset(roots), NARROW_DEPTH)
    found = _CLOSURES.get(key)
    if found is None:
        traceable = {line.split(" ", 1)[0] for line in available.splitlines()}
        found = callee_closure(
            roots, symbols, read_kernel, arch, traceable.__contains__, depth=NARROW_DEPTH
        )
        _CLOSURES[key] = found
    return found


#: Call graphs already read, by (roots, depth): the kernel's text does not change
#: while it runs, and reading it means disassembling many functions (tests trace the same
#: program, loaded anew, test after test).
_CLOSURES: dict[tuple[frozenset[int], int], Narrowing] = {}


def _kernel_symbols() -> KernelSymbols:
    """The process's /proc/kallsyms table (`live_kallsyms`): the core kernel's
    functions are all a call graph under helpers needs."""
    return live_kallsyms()
