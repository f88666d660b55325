"""Each BPF helper of the running kernel, and how each backend observes its calls:
what `pytest-lbr doctor --helpers` prints.

A helper's C name (bpf_helpers.h) is in the kernel's BTF; the function that
implements it is its `bpf_<name>_proto`'s `func` (`kernel.helpers`); whether the
function tracer can patch it is `available_filter_functions`; whether it calls
anything the tracer can is read from its code (/proc/kcore). The graph backend
records a call of a patchable function; a call of an unpatchable one shows as
the parent of what it calls, given its caller from the caller's code
(`capture.call_sites`); one that calls nothing patchable is proven only where
its call site dominates a recorded call (`capture.implied`). The LBR backend
sees every call as a branch, on hardware LBR (none on software events).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["HelperRow", "format_rows", "graph_view", "helper_rows", "read_rows"]

RECORDED = "recorded"
AS_PARENT = "as the parent of its calls; caller from the caller's code"
IMPLIED = "implied where its call site dominates a recorded call, else not observable"
INLINED_OR_UNKNOWN = "no implementation read: unknown"


@dataclass(frozen=True)
class HelperRow:
    """One helper of this kernel."""

    #: As bpf_helpers.h names it: "bpf_probe_read_str".
    helper: str
    #: The kernel functions that implement it (some program types get their own).
    functions: tuple[str, ...]
    #: Per function: can the function tracer patch it?
    traceable: tuple[bool, ...]
    #: How the graph backend observes a call of it.
    graph: str


def graph_view(traceable: bool, calls_traceable: bool | None) -> str:
    """How the graph backend sees a call of a function: `traceable` by the function
    tracer; `calls_traceable`: whether its code calls a function that is (None:
    its code could not be read)."""
    if traceable:
        return RECORDED
    if calls_traceable:
        return AS_PARENT
    if calls_traceable is None:
        return f"{AS_PARENT} if it calls a traced function; else {IMPLIED}"
    return IMPLIED


def helper_rows(
    ids: dict[int, str],
    implements: dict[str, str],
    traceable: Callable[[str], bool],
    callees: Callable[[str], Iterable[str] | None],
) -> list[HelperRow]:
    """One row per helper of `ids` (helper id -> name), in id order. `implements`:
    kernel function -> helper; `callees(function)`: the functions its code calls
    (None: unreadable)."""
    by_helper: dict[str, list[str]] = {}
    for func, helper in implements.items():
        by_helper.setdefault(helper, []).append(func)
    rows = []
    for _, helper in sorted(ids.items()):
        funcs = tuple(sorted(by_helper.get(helper, ())))
        marks = tuple(traceable(f) for f in funcs)
        if not funcs:
            rows.append(HelperRow(helper, (), (), INLINED_OR_UNKNOWN))
            continue
        views = []
        for func, mark in zip(funcs, marks, strict=True):
            called = callees(func) if not mark else ()
            calls_traceable = None if called is None else any(map(traceable, called))
            views.append(graph_view(mark, calls_traceable))
        graph = (
            views[0]
            if len(set(views)) == 1
            else "; ".join(f"{f}: {v}" for f, v in zip(funcs, views, strict=True))
        )
        rows.append(HelperRow(helper, funcs, marks, graph))
    return rows


def format_rows(rows: Iterable[HelperRow], *, markdown: bool = False) -> str:
    """The rows as text columns, or as a Markdown table."""
    head = ("helper (C name)", "implemented by", "function tracer", "graph backend", "LBR")
    lines = []
    for r in rows:
        impl = ", ".join(r.functions) or "-"
        patch = ", ".join("yes" if t else "no" for t in r.traceable) or "-"
        lines.append((r.helper, impl, patch, r.graph, "branch records (hardware LBR)"))
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        out += ["| " + " | ".join(f"`{c}`" if i < 2 else c for i, c in enumerate(x)) + " |"
                for x in lines]  # fmt: skip
        return "\n".join(out)
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(3)]
    return "\n".join(
        "  ".join(c.ljust(widths[i]) if i < 3 else c for i, c in enumerate(x))
        for x in [head, *lines]
    )


def read_rows() -> tuple[list[HelperRow], str]:
    """This kernel's rows, and "" or why they are incomplete (needs root: kallsyms
    addresses, /proc/kcore, tracefs)."""
    from pytest_lbr.capture.call_sites import call_sites, calls_in
    from pytest_lbr.kernel.functions import filter_functions_text
    from pytest_lbr.kernel.helpers import helper_ids, helper_implementations
    from pytest_lbr.kernel.tracefs import TracefsError, find_tracefs

    ids = helper_ids()
    if not ids:
        return [], "this kernel has no BTF (/sys/kernel/btf/vmlinux): no helper names"
    syms = call_sites.kallsyms()
    if syms is None:
        return [], "kallsyms shows no addresses here (not root)"
    root = find_tracefs()
    if root is None:
        return [], "tracefs is not mounted (pytest-lbr doctor --mount mounts it)"
    try:
        available = filter_functions_text(root)
    except (OSError, TracefsError) as exc:
        return [], f"cannot read available_filter_functions: {exc}"
    names = frozenset(line for line in available.splitlines() if line and " " not in line)

    def locate(addr: int) -> str | None:
        sym = syms.lookup(addr)
        return sym.name if sym is not None and sym.offset == 0 else None

    implements, why = helper_implementations(ids.values(), locate, None, syms.protos)

    def callees(func: str) -> list[str] | None:
        start = syms.address_of(func)
        end = syms.end_of(start) if start is not None else None
        if start is None or end is None:
            return None
        found = [locate(target) for _, target in calls_in(func, start, end - start)]
        return [f for f in found if f]

    return helper_rows(ids, implements, names.__contains__, callees), why
