"""Explain a failed `assert trace.called(...)` / `assert trace.has_path(...)`.

pytest's assertion rewriting shows `assert False` and a cut-down repr; it cannot
say *why* a call or path is missing. When a test fails with an AssertionError, the
plugin hands the exception here: we find the `called` / `has_path` calls in the
failing assert statement, re-evaluate them in the test's frame (only plain names,
attributes, subscripts and constants: nothing with side effects) and, for those
that are false, describe the closest partial match and show the call tree
around what the query asked about, cut to a readable length. The plugin adds the text as a
section under the traceback.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from pytest_lbr.model import Location, Trace, format_hit_header, helper_matches
from pytest_lbr.model.text import CallFrame, lines_around, tree_lines

__all__ = [
    "MAX_TRACE_LINES",
    "explain_called",
    "explain_failure",
    "explain_has_path",
    "trace_excerpt",
    "why_false",
]

#: Branch lines shown under a failure; the full trace goes to --lbr-report.
MAX_TRACE_LINES = 40
_QUERIES = ("called", "has_path")
_SIMPLE = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Starred)


def explain_failure(excinfo: Any, full: str | None = None) -> str | None:
    """The explanation for a failed assert in `excinfo` (a pytest ExceptionInfo), or
    None; `full`: where the whole trace is written (the report's text file)."""
    entry = excinfo.traceback[-1]
    try:
        tree = ast.parse(textwrap.dedent(str(entry.statement)))
    except SyntaxError:
        return None
    parts: list[str] = []
    traces: list[tuple[Trace, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _QUERIES or not _simple(node):
            continue
        try:
            obj = entry.frame.eval(ast.unparse(node.func.value))
            args = [entry.frame.eval(ast.unparse(a)) for a in node.args]
            kwargs = {k.arg: entry.frame.eval(ast.unparse(k.value)) for k in node.keywords if k.arg}
        except Exception:
            continue
        if not isinstance(obj, Trace):
            continue
        found = _explain(obj, node.func.attr, args, kwargs)
        if found is None:
            continue
        parts.append(found[0])
        if all(t is not obj for t, _ in traces):
            traces.append((obj, found[1]))
    if not parts:
        return None
    return "\n\n".join([*parts, *(trace_excerpt(t, f, full=full) for t, f in traces)])


def why_false(
    trace: Trace, query: str, *args: Any, full: str | None = None, **kwargs: Any
) -> str | None:
    """What a failed `assert trace.<query>(*args, **kwargs)` ("called", "has_path")
    shows under its traceback: why, then the call tree around it (`full`: where the
    whole trace is); None when the query is True."""
    found = _explain(trace, query, args, kwargs)
    if found is None:
        return None
    return f"{found[0]}\n\n{trace_excerpt(trace, found[1], full=full)}"


def _explain(
    trace: Trace, query: str, args: Any, kwargs: dict[str, Any]
) -> tuple[str, tuple[str, ...]] | None:
    """(why the query is False, the names its tree excerpt centres on), or None."""
    if query == "called":
        if trace.called(*args, **kwargs):
            return None
        return explain_called(trace, *args, **kwargs), _focus_of_called(trace, *args, **kwargs)
    if trace.has_path(*args):
        return None
    return explain_has_path(trace, *args), trace.closest_path(*args).matched[-1:]


def _focus_of_called(trace: Trace, callee: str, by: str | None = None) -> tuple[str, ...]:
    """Where a failed `called` is best seen: the caller it names, else who did call
    the callee."""
    return (by,) if by else tuple(trace.callers_of(callee)[:1])


def _simple(call: ast.Call) -> bool:
    nodes = [call.func.value, *call.args, *(k.value for k in call.keywords)]  # type: ignore[attr-defined]
    return all(
        isinstance(n, _SIMPLE) for node in nodes for n in ast.walk(node) if isinstance(n, ast.expr)
    )


def _names(names: list[str], limit: int = 12) -> str:
    if not names:
        return "(none)"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def explain_called(trace: Trace, callee: str, by: str | None = None) -> str:
    """Why `trace.called(callee, by)` is false: who did call it, what `by` called instead."""
    what = f"trace.called({callee!r}" + (f", by={by!r})" if by else ")")
    lines = [f"{what} is False"]
    if trace.no_branches:
        return f"{lines[0]}: this trace has no branches: {trace.no_branches}"
    callers = trace.callers_of(callee)
    inlined = _inlined_in(trace, callee, by)
    if callers:
        lines.append(f"  {callee} was called, but by: {_names(callers)}")
    elif not inlined or _still_called(trace, callee, by):
        lines.append(f"  no call into {callee} at all")
    lines.extend(f"  {line}" for line in inlined if not callers)
    if by is not None:
        made: list[str] = []
        for b in trace.calls():
            shown = (b.dst.symbol or "") + _helper_note(b.dst)
            if _glob(b.src.symbol, by) and b.dst.symbol and shown not in made:
                made.append(shown)
        lines.append(f"  {by} called: {_names(made)}")
        lines.extend(_called_by_its_functions(trace, by))
    if not trace.hits:
        lines.append("  the trace is empty: the target never fired while armed")
    return "\n".join(lines)


def _still_called(trace: Trace, helper: str, by: str | None) -> bool:
    """Does a program (`by`, if given) still call `helper` at some call site (the
    others inlined or removed: BPF_KSYSCALL writes the body twice, one copy dead)?"""
    return any(
        call.fate in ("call", "rewritten") and helper_matches(call.helper, helper)
        for prog in trace.programs().values()
        if by is None or any(_glob(n, by) for n in prog.names)
        for call in prog.calls
    )


def _helper_note(loc: Location) -> str:
    return f" [{loc.helper}]" if loc.helper and loc.helper != loc.symbol else ""


def _called_by_its_functions(trace: Trace, by: str) -> list[str]:
    """For a BPF program `by`: what its subprograms and callbacks called (calls
    made there are theirs, not the program's)."""
    out = []
    for name, prog in trace.programs().items():
        if not any(_glob(n, by) for n in prog.names):
            continue
        for fn in prog.functions[1:]:
            made: list[str] = []
            for b in trace.calls():
                shown = (b.dst.symbol or "") + _helper_note(b.dst)
                if b.src.symbol == fn and b.dst.symbol and shown not in made:
                    made.append(shown)
            if made:
                out.append(f"  {name}'s function {fn} called: {_names(made)}")
    return out


#: What a failure message says of a call that left no call behind.
_LOST = {
    "inlined": "inlined by this kernel's verifier",
    "removed": "removed by this kernel's verifier as unreachable",
    "unknown": "left no call (inlined or removed: cannot tell on this kernel)",
}


def _inlined_in(trace: Trace, helper: str, by: str | None) -> list[str]:
    """One line per traced program (`by`, if given) whose verifier inlined or removed
    `helper`, naming the callback it was given and how often the trace saw it call out."""
    out = []
    for name, prog in trace.programs().items():
        if by is not None and not any(_glob(n, by) for n in prog.names):
            continue
        for call in prog.calls:
            if call.fate not in _LOST or not helper_matches(call.helper, helper):
                continue
            line = f"{call.helper}: {_LOST[call.fate]} in {name}"
            if call.callback:
                made = sum(1 for b in trace.calls() if b.src.symbol == call.callback)
                line += f"; its callback {call.callback} made {made} call(s) in this trace"
            if line not in out:
                out.append(line)
    return out


def explain_has_path(trace: Trace, *functions: str) -> str:
    """Why `trace.has_path(*functions)` is false: how far the path got, and what came next."""
    match = trace.closest_path(*functions)
    wanted = " -> ".join(functions)
    lines = [f"trace.has_path({', '.join(map(repr, functions))}) is False", f"  wanted:  {wanted}"]
    if trace.no_branches:
        return f"{lines[0]}: this trace has no branches: {trace.no_branches}"
    got = " -> ".join(match.matched) if match.matched else "(nothing: not even the first)"
    lines.append(f"  matched: {got}  ({len(match.matched)} of {len(functions)})")
    lines.append(f"  missing: {match.missing}")
    seen = trace.functions()
    if match.matched:
        after = seen[_end_of_match(seen, match.matched) :]
        lines.append(f"  after {match.matched[-1]} the trace went: {_names(after, 10)}")
    else:
        lines.append(f"  functions(): {_names(seen, 16)}")
    return "\n".join(lines)


def trace_excerpt(
    trace: Trace,
    focus: tuple[str, ...] = (),
    max_lines: int = MAX_TRACE_LINES,
    full: str | None = None,
) -> str:
    """The trace as call trees, cut to `max_lines` lines around the first call of a
    function `focus` names (glob; the head of the trace when none), with where the
    whole trace is (`full`)."""
    out = [
        f"trace: backend={trace.backend} kernel={trace.kernel_release or '?'} "
        f"hits={len(trace.hits)} branches={len(trace)} lost={trace.lost}"
    ]
    trees = [(hit, tree_lines(hit)) for hit in trace.hits if hit.branches]

    def wanted(frame: CallFrame) -> bool:
        return any(_glob(n, f) for n in frame.names() for f in focus)

    at = next(
        (
            i
            for i, (_, lines) in enumerate(trees)
            if any(ln.frame is not None and wanted(ln.frame) for ln in lines)
        ),
        0,
    )
    if trees:
        hit, lines = trees[at]
        which = f" (hit {at + 1} of {len(trees)})" if len(trees) > 1 else ""
        out.append(format_hit_header(hit) + which)
        out.extend(lines_around(lines, wanted, max_lines))
    elif trace.hits:
        out.append(format_hit_header(trace.hits[0]) + " (no calls recorded)")
    where = full or "--lbr-report=DIR writes it"
    out.append(f"(the whole trace: {where}; its branch records: trace.edges())")
    return "\n".join(out)


def _glob(name: str | None, pattern: str) -> bool:
    import fnmatch

    return name is not None and fnmatch.fnmatchcase(name, pattern)


def _end_of_match(seen: list[str], matched: tuple[str, ...]) -> int:
    # Replays closest_path's greedy walk: the index just past the last matched function.
    pos = 0
    for name in matched:
        pos = seen.index(name, pos) + 1
    return pos
