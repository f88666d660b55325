"""Which names exist on this kernel, for refusing a trace query about a name nothing has.

`Trace.called("bpf_map_lokup_elem")` must not answer False: a test asserting
`not trace.called(...)` with a typo would pass whatever the kernel did. A trace
asks `TracerNames` (its `KnownNames`) only when an answer would be False, so
the happy path costs nothing; what it reads is read then: the helper ids of the
kernel's BTF, /proc/kallsyms (kernel functions, kfuncs, and each JITed BPF
function as `bpf_prog_<tag>_<name>`, re-read once when a name is not there yet)
and the programs the trace's targets name.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable

from pytest_lbr.kernel.helpers import helper_ids
from pytest_lbr.model import ProgramCalls
from pytest_lbr.programs.written import WrittenPrograms
from pytest_lbr.symbols.kallsyms import live_kallsyms
from pytest_lbr.targets import Target

__all__ = ["TracerNames"]

#: A JITed BPF function's kallsyms name: bpf_prog_<tag>_<function> (kernel/bpf/core.c,
#: bpf_get_prog_name()); the tag is 16 hex digits.
_BPF_SYMBOL = re.compile(r"bpf_prog_[0-9a-f]{16}_(.+)")


@functools.cache
def _helper_names() -> frozenset[str]:
    """Every helper's name as bpf_helpers.h spells it (the kernel BTF's enum)."""
    return frozenset(helper_ids().values())


class TracerNames:
    """The names a finished trace's queries may use beyond its own records
    (`pytest_lbr.model.KnownNames`): its target programs', and every helper, kernel
    function and loaded BPF function of this kernel. `written`: the tracer's book
    (`Tracer.written`), with which the target programs' helper calls are described."""

    def __init__(self, targets: Iterable[Target], written: WrittenPrograms | None = None) -> None:
        self._targets = [t for t in targets if t.is_program]
        self._written = written
        self._traced: list[tuple[str, ...]] | None = None
        self._ids: list[int] = []
        self._calls: list[ProgramCalls] | None = None

    def traced(self) -> list[tuple[str, ...]]:
        """(name, kernel name, functions...) of each program target, read once."""
        if self._traced is None:
            from pytest_lbr.programs.find import resolve_program

            out: list[tuple[str, ...]] = []
            for t in self._targets:
                try:
                    with resolve_program(t) as ref:
                        out.append((ref.display_name, ref.name, *ref.functions))
                        self._ids.append(ref.id)
                except (OSError, ValueError):  # unloaded since: the trace's records still name it
                    continue
            self._traced = out
        return self._traced

    def calls(self) -> list[ProgramCalls]:
        """Each program target's helper calls, from its tables (read once, as a
        trace that went through its code reads them)."""
        if self._calls is None:
            from pytest_lbr.symbols import get_symbolizer

            self.traced()
            programs = get_symbolizer().bpf
            out: list[ProgramCalls] = []
            for prog_id in self._ids:
                tables = programs.read(prog_id, self._written)
                if tables is None:  # loaded after the symbolizer last looked
                    try:
                        programs.refresh()
                    except OSError:
                        continue
                    tables = programs.read(prog_id, self._written)
                if tables is not None and tables.calls is not None:
                    out.append(tables.calls)
            self._calls = out
        return self._calls

    def exists(self, pattern: str, *, kernel_only: bool = False) -> bool:
        """Does `pattern` (glob) name a helper, kfunc, kernel function or a function
        of a loaded BPF program (`kernel_only`: a kernel function or kfunc)?"""
        if not kernel_only and _any(_helper_names(), pattern):
            return True
        try:
            table = live_kallsyms()
        except OSError:
            return True  # nothing to check against: never refuse on a guess
        if self._in(table.names, pattern, kernel_only):
            return True
        if kernel_only:
            return False
        # A program loaded after the table was read: its functions are new.
        table.reload()
        return self._in(table.names, pattern, kernel_only)

    def similar(self, name: str) -> list[str]:
        """Names that start like `name` (helpers, kernel and BPF functions), for an
        error message to pick the nearest from."""
        head = name[:4]
        out = [h for h in _helper_names() if h.startswith(head)]
        try:
            names = live_kallsyms().names
        except OSError:
            return out
        for n in names:
            found = _BPF_SYMBOL.fullmatch(n)
            short = found[1] if found else n
            if short.startswith(head):
                out.append(short)
        return out

    @staticmethod
    def _in(names: list[str], pattern: str, kernel_only: bool) -> bool:
        """Is `pattern` one of `names` (kallsyms'), a JITed BPF function's name
        counting as its function's unless `kernel_only`?"""
        match = re.compile(fnmatch.translate(pattern)).match
        for n in names:
            if n.startswith("bpf_prog_"):
                found = _BPF_SYMBOL.fullmatch(n)
                if found is not None:
                    if not kernel_only and match(found[1]):
                        return True
                    continue
            if match(n):
                return True
        return False


def _any(names: Iterable[str], pattern: str) -> bool:
    return pattern in names or any(fnmatch.fnmatchcase(n, pattern) for n in names)
