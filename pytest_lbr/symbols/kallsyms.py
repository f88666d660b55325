"""Kernel symbols from /proc/kallsyms: live (KASLR-applied) addresses, module names.

Read once and searched with bisect. BPF programs and modules come and go, so
the owner re-reads (`KernelSymbols.reload`) when an address looks newer than
the table.
"""

from __future__ import annotations

import bisect
import operator
import threading
import time
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from typing import NamedTuple

__all__ = ["KALLSYMS", "KernelSymbols", "Symbol", "live_kallsyms"]

KALLSYMS = "/proc/kallsyms"

# Text, weak and (for JIT images) local symbols; data symbols never hold code.
_CODE_TYPES = frozenset("tTwW")
# Initialised and read-only data: where a `const struct bpf_func_proto` lives.
_DATA_TYPES = frozenset("dDrR")


@dataclass(frozen=True)
class Symbol:
    """The kernel symbol an address falls in."""

    name: str
    offset: int
    #: None for the core kernel, else the module name ("bpf" for BPF programs).
    module: str | None


class _Table(NamedTuple):
    """One read of the file: swapped in whole by `reload`, so a reader in another
    thread (a live trace's) never sees one read's addresses with another's names."""

    starts: list[int]
    names: list[str]
    modules: list[str | None]
    by_name: dict[str, int]
    local: set[int]
    core_start: int
    core_end: int


class KernelSymbols:
    """A sorted table of code symbols, as /proc/kallsyms showed them at load time."""

    def __init__(self, path: str = KALLSYMS, columns: bool | None = None) -> None:
        self.path = path
        #: Read the core kernel's lines as columns (`reload`); default: only from
        #: /proc/kallsyms, whose format the kernel guarantees (s_show() in
        #: kernel/kallsyms.c: "%px %c %s\n", names without blanks).
        self.columns = path == KALLSYMS if columns is None else columns
        self._table = _Table([], [], [], {}, set(), 0, 0)
        #: The core kernel's part of the last read, reused while its text is the same.
        self._core: _Core | None = None
        #: The modules' lines of the last read and their rows.
        self._modules: tuple[str, list[tuple[int, str, str | None, str]]] | None = None
        #: time.monotonic() when the table was last read (just before reading).
        self.read_at = 0.0
        #: (name, address) of the core kernel's `*_proto` and `*_map_ops` data
        #: symbols, in file order (a helper's `struct bpf_func_proto`, a map type's
        #: `struct bpf_map_ops`: `kernel.helpers`); None when
        #: the file was read line by line, which keeps no data symbols.
        self.protos: list[tuple[str, int]] | None = None
        self.reload()

    def reload(self) -> None:
        """Read the table again (new BPF programs or modules appear this way).

        Lines that are not `ADDRESS TYPE NAME [MODULE]` are skipped; only an
        unreadable file raises (OSError).
        """
        self.read_at = time.monotonic()
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        # The core kernel's lines come first, sorted by address, three words each
        # (scripts/kallsyms sorts them), and are most of the file: read as columns
        # (C loops, where line by line would be Python's). Modules and BPF
        # programs follow, each line tagged "[name]".
        tagged = text.find("\t[")
        split = len(text) if tagged < 0 else text.rfind("\n", 0, tagged) + 1
        core = self._core
        if self.columns and (core is None or core.text != text[:split]):
            # A reload finds the core kernel as it was (it does not change while
            # the kernel runs): only the modules' and programs' lines are read again.
            core = self._core = _read_core(text[:split])
        if core is None:  # line by line
            core, split = _NO_CORE, 0
        self.protos = core.protos
        starts, names = core.starts, core.names
        # Modules' lines come next, then BPF programs' (kallsyms_update_iter():
        # modules, ftrace trampolines, BPF, kprobe pages): modules rarely change, so
        # their rows are reused while their text is the same, as the core's are.
        bpf_at = text.find("\t[bpf]", split)
        cut = len(text) if bpf_at < 0 else max(split, text.rfind("\n", 0, bpf_at) + 1)
        if self._modules is None or self._modules[0] != text[split:cut]:
            self._modules = (text[split:cut], _rows(text[split:cut]))
        rows = [*self._modules[1], *_rows(text[cut:])]
        by_name = dict(core.by_name)
        local = set(core.local)
        for addr, name, _, kind in rows:
            by_name.setdefault(name, addr)
            if kind == "t":
                local.add(addr)
        modules: list[str | None] = [None] * len(starts)
        rows.sort(key=_ADDRESS)  # stable: aliases keep their kallsyms order
        if core.in_order and (not rows or not starts or rows[0][0] >= starts[-1]):
            starts = starts + [r[0] for r in rows]
            names = names + [r[1] for r in rows]
            modules += [r[2] for r in rows]
        else:  # modules below the kernel (arm64), or an unsorted file
            merged = sorted(
                chain(zip(starts, names, modules, strict=True), (r[:3] for r in rows)), key=_ADDRESS
            )
            starts = [r[0] for r in merged]
            names = [r[1] for r in merged]
            modules = [r[2] for r in merged]
        core_addrs = [*core.bounds, *(r[0] for r in rows if r[2] is None)]
        core_start, core_end = (min(core_addrs), max(core_addrs)) if core_addrs else (0, 0)
        self._table = _Table(starts, names, modules, by_name, local, core_start, core_end)

    @property
    def starts(self) -> list[int]:
        """The symbols' addresses, ascending."""
        return self._table.starts

    @property
    def names(self) -> list[str]:
        """The symbols' names, in `starts` order."""
        return self._table.names

    @property
    def modules(self) -> list[str | None]:
        """The symbols' modules (None: core kernel), in `starts` order."""
        return self._table.modules

    @property
    def readable(self) -> bool:
        """False when kallsyms hides addresses (no root / kptr_restrict)."""
        return bool(self.starts)

    def address_of(self, name: str) -> int | None:
        """The live address of a symbol (first one of that name)."""
        return self._table.by_name.get(name)

    def lookup(self, addr: int) -> Symbol | None:
        """The symbol at or before `addr`, or None before the first symbol."""
        t = self._table
        i = bisect.bisect_right(t.starts, addr) - 1
        if i < 0:
            return None
        # Several names at one address (aliases): take the first, kallsyms order, except
        # that live BPF JIT code (module "bpf") wins. 6.1 allocates BPF images where
        # modules live, and a read of kallsyms racing a module's init listed the module's
        # freed `veth_init` at a live trampoline's address.
        start = t.starts[i]
        j = bisect.bisect_left(t.starts, start, 0, i)
        for k in range(j, i + 1):
            if t.modules[k] == "bpf":
                j = k
                break
        return Symbol(t.names[j], addr - start, t.modules[j])

    def is_local(self, addr: int) -> bool:
        """Whether a file-local (static, type `t`) function starts at `addr`."""
        return addr in self._table.local

    def end_of(self, addr: int) -> int | None:
        """Start of the next symbol after the one containing `addr` (its end bound)."""
        starts = self._table.starts
        i = bisect.bisect_right(starts, addr)
        return starts[i] if i < len(starts) else None

    def in_core(self, addr: int) -> bool:
        """True if addr lies in the core kernel's symbol range (not modules/BPF)."""
        # kallsyms has no sizes: allow the last core symbol some body. Modules
        # and JIT images live gigabytes away: above the kernel on x86-64
        # (0xffffffffa0000000 and up), below it on arm64 (0xffff8000...: the
        # module and BPF JIT area under the kernel image).
        t = self._table
        return bool(t.starts) and t.core_start <= addr < t.core_end + (2 << 20)


_ADDRESS = operator.itemgetter(0)


class _Core(NamedTuple):
    """The core kernel's lines of one read, as columns."""

    text: str
    starts: list[int]
    names: list[str]
    by_name: dict[str, int]
    local: frozenset[int]
    protos: list[tuple[str, int]] | None
    #: Whether `starts` ascend (the merge with module lines relies on it).
    in_order: bool
    #: The lowest and highest core address, if any.
    bounds: tuple[int, ...]


_NO_CORE = _Core("", [], [], {}, frozenset(), None, True, ())


def _read_core(text: str) -> _Core | None:
    """The core kernel's lines (`ADDRESS TYPE NAME` each) as columns; None when a
    line is not three words (then the file is read line by line)."""
    words = text.split()
    columns = _core_columns(words, text.count("\n"))
    if columns is None:
        return None
    starts, names, types = columns
    return _Core(
        text,
        starts,
        names,
        dict(zip(reversed(names), reversed(starts), strict=True)),  # first one wins
        frozenset(compress(starts, map("t".__eq__, types))),
        # The helpers' protos come from this read too: one read of the file a
        # session, not one more.
        _protos(words),
        all(map(operator.le, starts, islice(starts, 1, None))),
        (min(starts), max(starts)) if starts else (),
    )


_LIVE: KernelSymbols | None = None
_LIVE_LOCK = threading.Lock()


def live_kallsyms() -> KernelSymbols:
    """The running kernel's table, one per process: the symbolizer, call-site
    searches and call graphs share it, so the file is read once and re-read once
    for all of them when something new appears (`reload`). Raises OSError when
    /proc/kallsyms cannot be read."""
    global _LIVE
    with _LIVE_LOCK:
        if _LIVE is None:
            _LIVE = KernelSymbols()
        return _LIVE


def _core_columns(words: list[str], lines: int) -> tuple[list[int], list[str], list[str]] | None:
    """(addresses, names, types) of the code symbols of `lines` lines split into
    `words`, whose every line is `ADDRESS TYPE NAME`, in file order; None when a
    line is not three words."""
    if len(words) != 3 * lines:
        return None
    # Cheap checks that every line was three words (a line of two and one of four
    # would shift the columns): types one letter, addresses of one length.
    if words and (max(map(len, words[1::3])) != 1 or len(set(map(len, words[0::3]))) != 1):
        return None
    code = list(map(_CODE_TYPES.__contains__, words[1::3]))
    try:
        starts = list(map(int, compress(words[0::3], code), repeat(16)))
    except ValueError:  # not an address: read line by line, which skips it
        return None
    names = list(compress(words[2::3], code))
    types = list(compress(words[1::3], code))
    if not all(starts):  # hidden addresses (no CAP_SYSLOG): useless
        shown = list(map(bool, starts))
        starts = list(compress(starts, shown))
        names = list(compress(names, shown))
        types = list(compress(types, shown))
    return starts, names, types


def _protos(words: list[str]) -> list[tuple[str, int]]:
    """(name, address) of the `*_proto*` and `*_map_ops` data symbols of `words` (three per line,
    checked by `_core_columns`), in file order, hidden (zero) addresses left out."""
    names = words[2::3]
    # "_proto" anywhere: some are named bpf_get_stackid_proto_tp (kernel/trace/bpf_trace.c).
    # The maps' `struct bpf_map_ops` (`htab_map_ops`) name the ops programs call.
    is_proto = [("_proto" in n or n.endswith("_map_ops")) for n in names]
    out: list[tuple[str, int]] = []
    columns = (compress(words[0::3], is_proto), compress(words[1::3], is_proto))
    for addr, kind, name in zip(*columns, compress(names, is_proto), strict=True):
        if kind in _DATA_TYPES:
            try:
                value = int(addr, 16)
            except ValueError:  # not an address: not a symbol line
                continue
            if value:
                out.append((name, value))
    return out


def _rows(text: str) -> list[tuple[int, str, str | None, str]]:
    """(address, name, module, type) of each code symbol line of `text`, in order."""
    rows: list[tuple[int, str, str | None, str]] = []
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) < 3 or parts[1] not in _CODE_TYPES:
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError:  # not an address: not a symbol line
            continue
        if addr == 0:  # hidden addresses (no CAP_SYSLOG): useless
            continue
        module = parts[3].strip("[]") if len(parts) > 3 else None
        rows.append((addr, parts[2], module, parts[1]))
    return rows
