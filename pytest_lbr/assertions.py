"""Explain a failed `assert trace.called(...)` / `assert trace.has_path(...)`.

pytest's assertion rewriting shows `assert False` and a cut-down repr; it cannot
say *why* a call or path is missing. When a test fails with an AssertionError, the
plugin hands the exception here: we find the `called` / `has_path` calls in the
failing assert statement, re-evaluate them in the test's frame (only plain names,
attributes, subscripts and constants: nothing with side effects) and, for those
that are false, describe the closest partial match and show the trace in the
retsnoop/bpflbr format, cut to a readable length. The plugin adds the text as a
section under the traceback.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from pytest_lbr.model import Location, Trace, format_branches, format_hit_header, helper_matches

__all__ = [
    "MAX_TRACE_LINES",
    "explain_called",
    "explain_failure",
    "explain_has_path",
    "trace_excerpt",
]

#: Branch lines shown under a failure; the full trace goes to --lbr-report.
MAX_TRACE_LINES = 40
_QUERIES = ("called", "has_path")
_SIMPLE = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Starred)


def explain_failure(excinfo: Any) -> str | None:
    """The explanation for a failed assert in `excinfo` (a pytest ExceptionInfo), or None."""
    entry = excinfo.traceback[-1]
    try:
        tree = ast.parse(textwrap.dedent(str(entry.statement)))
    except SyntaxError:
        return None
    parts: list[str] = []
    traces: list[Trace] = []
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
        if node.func.attr == "called":
            if obj.called(*args, **kwargs):
                continue
            parts.append(explain_called(obj, *args, **kwargs))
        else:
            if obj.has_path(*args):
                continue
            parts.append(explain_has_path(obj, *args))
        if all(t is not obj for t in traces):
            traces.append(obj)
    if not parts:
        return None
    return "\n\n".join([*parts, *(trace_excerpt(t) for t in traces)])


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


def trace_excerpt(trace: Trace, max_lines: int = MAX_TRACE_LINES) -> str:
    """The trace in the known format, cut to `max_lines` branch lines (head and tail)."""
    out = [
        f"trace: backend={trace.backend} kernel={trace.kernel_release or '?'} "
        f"hits={len(trace.hits)} branches={len(trace)} lost={trace.lost}"
    ]
    budget = max_lines
    for hit in trace.hits:
        out.append(format_hit_header(hit))
        text = format_branches(hit.branches).splitlines() if hit.branches else []
        if len(text) <= budget:
            out.extend(text)
            budget -= len(text)
        else:
            head, tail = max(budget - 10, 0), min(10, budget)
            out.extend(text[:head])
            out.append(
                f"... {len(text) - head - tail} lines left out (full trace: --lbr-report=DIR)"
            )
            out.extend(text[len(text) - tail :] if tail else [])
            budget = 0
        if budget <= 0:
            rest = len(trace.hits) - trace.hits.index(hit) - 1
            if rest:
                out.append(f"... {rest} more hit(s) left out")
            break
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
