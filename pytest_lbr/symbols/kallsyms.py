"""Kernel symbols from /proc/kallsyms: live (KASLR-applied) addresses, module names.

Read once and searched with bisect. BPF programs and modules come and go, so
the owner re-reads (`KernelSymbols.reload`) when an address looks newer than
the table.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["KernelSymbols", "Symbol"]

# Text, weak and (for JIT images) local symbols; data symbols never hold code.
_CODE_TYPES = frozenset("tTwW")


@dataclass(frozen=True)
class Symbol:
    """The kernel symbol an address falls in."""

    name: str
    offset: int
    #: None for the core kernel, else the module name ("bpf" for BPF programs).
    module: str | None


class KernelSymbols:
    """A sorted table of code symbols, as /proc/kallsyms showed them at load time."""

    def __init__(self, path: str = "/proc/kallsyms") -> None:
        self.path = path
        self.starts: list[int] = []
        self.names: list[str] = []
        self.modules: list[str | None] = []
        self.reload()

    def reload(self) -> None:
        """Read the table again (new BPF programs or modules appear this way).

        Lines that are not `ADDRESS TYPE NAME [MODULE]` are skipped; only an
        unreadable file raises (OSError).
        """
        rows: list[tuple[int, str, str | None]] = []
        by_name: dict[str, int] = {}
        local: set[int] = set()
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
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
                rows.append((addr, parts[2], module))
                by_name.setdefault(parts[2], addr)
                if parts[1] == "t":
                    local.add(addr)
        rows.sort(key=lambda r: r[0])
        self.starts = [r[0] for r in rows]
        self.names = [r[1] for r in rows]
        self.modules = [r[2] for r in rows]
        self._by_name = by_name
        self._local = local
        core = [r[0] for r in rows if r[2] is None]
        self._core_start, self._core_end = (min(core), max(core)) if core else (0, 0)

    @property
    def readable(self) -> bool:
        """False when kallsyms hides addresses (no root / kptr_restrict)."""
        return bool(self.starts)

    def address_of(self, name: str) -> int | None:
        """The live address of a symbol (first one of that name)."""
        return self._by_name.get(name)

    def lookup(self, addr: int) -> Symbol | None:
        """The symbol at or before `addr`, or None before the first symbol."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        # Several names at one address (aliases): take the first, kallsyms order.
        start = self.starts[i]
        j = bisect.bisect_left(self.starts, start, 0, i)
        return Symbol(self.names[j], addr - start, self.modules[j])

    def is_local(self, addr: int) -> bool:
        """Whether a file-local (static, type `t`) function starts at `addr`."""
        return addr in self._local

    def end_of(self, addr: int) -> int | None:
        """Start of the next symbol after the one containing `addr` (its end bound)."""
        i = bisect.bisect_right(self.starts, addr)
        return self.starts[i] if i < len(self.starts) else None

    def in_core(self, addr: int) -> bool:
        """True if addr lies in the core kernel's symbol range (not modules/BPF)."""
        # kallsyms has no sizes: allow the last core symbol some body. Modules
        # and JIT images live gigabytes away: above the kernel on x86-64
        # (0xffffffffa0000000 and up), below it on arm64 (0xffff8000...: the
        # module and BPF JIT area under the kernel image).
        return bool(self.starts) and self._core_start <= addr < self._core_end + (2 << 20)
