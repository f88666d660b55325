"""A trace as text a person reads.

`str(trace)` is a call tree per hit, as function_graph and retsnoop's `-T` show one:
indented calls, the helper's name as the C wrote it beside the kernel function that ran
for it (`bpf_map_update_elem → htab_map_update_elem`), the source line of each call,
the hit's return value. Returns are not lines of their own (the graph backend records
no return address: a return printed as a branch record would show an offset no
instruction has). `trace.edges()` is the branch records, oldest first, in the format
of retsnoop and bpflbr: what LBR records and what golden files are made of.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pytest_lbr.model.records import (
    EXCEPTION_ENTRY,
    FRAME_KINDS,
    UNSEEN_CALLER,
    Branch,
    Hit,
    Location,
    ProgramCalls,
)

__all__ = [
    "TREE_DEPTH",
    "CallFrame",
    "TraceText",
    "call_tree",
    "edge_list",
    "format_branches",
    "format_hit_header",
    "tree_lines",
    "tree_text",
    "lines_around",
    "TreeLine",
    "trace_header",
]

#: How deep `str(trace)` draws calls; what lies deeper is counted, not drawn.
TREE_DEPTH = 24
#: The column call sites start at (labels longer than this push theirs right).
_SITE_COLUMN = 44
_BEFORE = "(called before the records begin)"
_NOT_RECORDED = "(entry not recorded)"
_JUMPS = ("jmp", "ind_jmp")


class TraceText(Protocol):
    """What the text of a trace reads of it (a `Trace`)."""

    backend: str
    kernel_release: str
    lost: int
    notes: list[str]
    hits: list[Hit]

    def programs(self) -> dict[str, ProgramCalls]: ...


@dataclass
class CallFrame:
    """One call of a hit's call tree; `count` > 1 where identical calls in a row were
    folded into one."""

    #: The function that ran (its symbol), "?" where no record names it.
    function: str
    #: The helper the BPF C wrote, where this function ran for one.
    helper: str | None = None
    #: `file:line` of the call, in the caller's code.
    site: str | None = None
    #: How it was entered when not by a recorded call: "(tail call from entry)".
    note: str = ""
    children: list[CallFrame] = field(default_factory=list)
    count: int = 1

    @property
    def title(self) -> str:
        """The frame's name as a line shows it, and how it was entered: without the
        count of folded calls."""
        return f"{self._name} {self.note}" if self.note else self._name

    @property
    def label(self) -> str:
        """The frame's name as a line shows it."""
        name = self._name + (f" \u00d7{self.count}" if self.count > 1 else "")
        return f"{name} {self.note}" if self.note else name

    @property
    def _name(self) -> str:
        if self.helper and self.helper != self.function:
            return f"{self.helper} \u2192 {self.function}"
        return self.function

    def names(self) -> tuple[str, ...]:
        """The names a query may know this frame by."""
        return (self.function, self.helper) if self.helper else (self.function,)

    def calls_below(self) -> int:
        """How many calls run under this frame (folded calls counted each time)."""
        return sum(c.count * (1 + c.calls_below()) for c in self.children)


def call_tree(hit: Hit) -> CallFrame:
    """The calls of one hit as a tree, from its call and return records.

    The root is the function the first record was taken in (a program's main
    function for a program's run). A call made from another function than the
    frame it falls in (a BPF subprogram or callback, a kernel function the tracer
    does not record entering) goes under a frame for that function marked "(entry
    not recorded)". Where records begin inside calls that return later (LBR's
    window starts anywhere), the frames returned into are added above the root,
    named by the returns."""
    branches = hit.branches
    depth = low = 0
    for b in branches:
        low = min(low, depth)
        depth += 1 if b.kind in FRAME_KINDS else -1 if b.kind == "ret" else 0
    chain = [CallFrame("?", note=_BEFORE) for _ in range(-low)]
    chain.append(CallFrame(_first_function(branches) or hit.target))
    for parent, child in zip(chain, chain[1:], strict=False):
        parent.children.append(child)
    stack = list(chain)
    for b in branches:
        if b.kind in FRAME_KINDS:
            _enter_caller(stack, b)
            frame = _frame_of(b)
            stack[-1].children.append(frame)
            stack.append(frame)
        elif b.kind == "implied":
            _enter_caller(stack, b)
            frame = _frame_of(b)
            frame.note = "(implied: proven by the code, not recorded)"
            stack[-1].children.append(frame)
        elif b.kind == "ret":
            while len(stack) > 1 and stack[-1].note == _NOT_RECORDED:
                stack.pop()
            if len(stack) > 1:
                stack.pop()
                if stack[-1].function == "?" and b.dst.symbol:
                    stack[-1].function = b.dst.symbol
        elif b.kind in _JUMPS and _is_tail_jump(b) and len(stack) > 1:
            # A jump into another function: a tail call (BPF's, or the compiler's
            # sibling call); the jumped-to function takes the frame.
            frame = CallFrame(b.dst.symbol or "?", site=b.src.source, note=_tail_note(b.src))
            stack[-2].children.append(frame)
            stack[-1] = frame
    root = chain[0]
    _fold(root)
    return root


def _enter_caller(stack: list[CallFrame], b: Branch) -> None:
    """Make the top of `stack` the function `b` was taken in."""
    if b.kind == "unseen":
        # Entered from nowhere recorded (a tail call, an exception): under the
        # innermost frame whose entry was recorded.
        while len(stack) > 1 and stack[-1].note == _NOT_RECORDED:
            stack.pop()
        return
    caller = b.src.symbol
    if not caller or b.src in (UNSEEN_CALLER, EXCEPTION_ENTRY):
        return
    if stack[-1].function == "?":
        stack[-1].function = caller
        return
    while len(stack) > 1 and stack[-1].note == _NOT_RECORDED and stack[-1].function != caller:
        stack.pop()
    if stack[-1].function != caller:
        frame = CallFrame(caller, note=_NOT_RECORDED)
        stack[-1].children.append(frame)
        stack.append(frame)


def _first_function(branches: Sequence[Branch]) -> str | None:
    for b in branches:
        if b.src not in (UNSEEN_CALLER, EXCEPTION_ENTRY) and b.src.symbol:
            prog = b.src.program
            if prog is not None and prog.functions and b.src.symbol in prog.functions:
                return prog.functions[0]  # a program's run starts in its main function
            return b.src.symbol
        if b.kind in FRAME_KINDS:
            return None  # the first record enters a function from nowhere recorded
    return None


def _frame_of(b: Branch) -> CallFrame:
    dst = b.dst
    helper = dst.helper
    if helper is None and b.src.program is not None:
        helper = b.src.program.helper_of(dst.symbol)
    frame = CallFrame(dst.symbol or f"{dst.addr:#x}", helper=helper)
    if b.kind != "unseen":
        frame.site = b.src.source
        return frame
    callers = b.tail_callers
    if callers:
        frame.note = f"(tail call from {'|'.join(callers)})"
    elif b.src == EXCEPTION_ENTRY:
        frame.note = "(exception)"
    else:
        frame.note = "(caller not recorded)"
    return frame


def _is_tail_jump(b: Branch) -> bool:
    dst = b.dst
    if not dst.symbol or dst.symbol == b.src.symbol:
        return False
    # x86-64's BPF tail call jumps past the callee's prologue (X86_TAIL_CALL_OFFSET).
    main = dst.program is not None and dst.program.functions[:1] == (dst.symbol,)
    return dst.offset == 0 or main


def _tail_note(src: Location) -> str:
    return f"(tail call from {src.symbol})" if src.symbol else "(tail call)"


def _fold(frame: CallFrame) -> None:
    # Identical calls in a row (a loop) become one frame "× N".
    folded: list[CallFrame] = []
    for child in frame.children:
        _fold(child)
        if folded and _same(folded[-1], child):
            folded[-1].count += child.count
        else:
            folded.append(child)
    frame.children = folded


def _same(a: CallFrame, b: CallFrame) -> bool:
    return (
        (a.function, a.helper, a.site, a.note) == (b.function, b.helper, b.site, b.note)
        and len(a.children) == len(b.children)
        and all(_same(x, y) for x, y in zip(a.children, b.children, strict=True))
    )


@dataclass(frozen=True)
class TreeLine:
    """One line of a drawn tree, with the frame it shows (None: a line about frames
    left out)."""

    text: str
    depth: int
    frame: CallFrame | None


def tree_lines(hit: Hit, *, depth: int = TREE_DEPTH, color: bool = False) -> list[TreeLine]:
    """The lines of a hit's call tree, drawn `depth` calls deep (what lies deeper is
    counted on one line); `color`: ANSI colour for a terminal."""
    root = call_tree(hit)
    out: list[TreeLine] = []
    returned = _returning_frame(root, hit.target)
    ret = "" if hit.retval is None else f" = {hit.retval}"

    def walk(frame: CallFrame, level: int) -> None:
        indent = "  " * level
        label = frame.label + (ret if frame is returned else "")
        if color:
            label = _bold(label) if level == 0 else label
        text = f"{indent}{label}"
        if frame.site:
            site = f"({frame.site})"
            text = f"{text:<{_SITE_COLUMN}} {_dim(site) if color else site}"
        out.append(TreeLine(text.rstrip(), level, frame))
        if not frame.children:
            return
        if level + 1 >= depth:
            n = frame.calls_below()
            out.append(
                TreeLine(
                    f"{indent}  \u2026 {n} call(s) below, deeper than {depth}", level + 1, None
                )
            )
            return
        for child in frame.children:
            walk(child, level + 1)

    walk(root, 0)
    return out


def _returning_frame(root: CallFrame, target: str) -> CallFrame:
    """The frame a hit's return value is of: the outermost call of the traced
    function (`kfunc:vfs_write`, `prog:name:entry`), else the root."""
    name = target.rpartition(":")[2]
    level = [root]
    while level:
        for frame in level:
            if fnmatch.fnmatchcase(frame.function, name):
                return frame
        level = [c for f in level for c in f.children]
    return root


def _bold(s: str) -> str:
    return f"\x1b[1m{s}\x1b[0m"


def _dim(s: str) -> str:
    return f"\x1b[2m{s}\x1b[0m"


def trace_header(trace: TraceText) -> list[str]:
    """The lines that open a trace's text: backend, kernel, hits, losses, notes, and
    what became of program calls that left no call behind."""
    out = [
        f"# backend={trace.backend} kernel={trace.kernel_release or '?'} "
        f"hits={len(trace.hits)} lost={trace.lost}"
    ]
    out.extend(f"# note: {n}" for n in trace.notes)
    for name, prog in trace.programs().items():
        lost = prog.lost_calls()
        if lost:
            out.append(f"# program {name}: {'; '.join(lost)}")
    return out


def tree_text(trace: TraceText, *, depth: int = TREE_DEPTH, color: bool = False) -> str:
    """The whole trace as call trees (`str(trace)`): the header, then each hit's
    header line and its tree."""
    out = trace_header(trace)
    if trace.lost:
        out.append(f"# {trace.lost} record(s) lost: calls may be missing from the trees")
    for hit in trace.hits:
        out.append(format_hit_header(hit))
        if hit.branches:
            out.extend(line.text for line in tree_lines(hit, depth=depth, color=color))
    return "\n".join(out)


def lines_around(
    lines: list[TreeLine], wanted: Callable[[CallFrame], bool], limit: int
) -> Iterator[str]:
    """At most `limit` of `lines`: the first frame `wanted` picks with the calls
    that lead to it and the lines after it (the head of the tree when none is
    picked); lines left out are counted."""
    at = next((i for i, ln in enumerate(lines) if ln.frame and wanted(ln.frame)), None)
    if len(lines) <= limit:
        yield from (ln.text for ln in lines)
        return
    if at is None:
        yield from (ln.text for ln in lines[: limit - 1])
        yield f"\u2026 {len(lines) - limit + 1} more line(s)"
        return
    # The path from the root to it: each ancestor is the last line above with less depth.
    path: list[int] = []
    need = lines[at].depth
    for i in range(at - 1, -1, -1):
        if lines[i].depth < need:
            path.append(i)
            need = lines[i].depth
    context = limit
    while True:
        before = min(context // 4, at)
        shown = sorted({*path, *range(at - before, min(at - before + context, len(lines)))})
        out = list(_with_gaps(lines, shown))
        if len(out) <= limit or context <= 1:
            yield from out[:limit]
            return
        context -= len(out) - limit


def _with_gaps(lines: list[TreeLine], shown: list[int]) -> Iterator[str]:
    last = -1
    for i in shown:
        if i > last + 1:
            yield f"{'  ' * lines[i].depth}\u2026 {i - last - 1} line(s)"
        yield lines[i].text
        last = i
    if last < len(lines) - 1:
        yield f"\u2026 {len(lines) - last - 1} more line(s)"


def format_branches(branches: Sequence[Branch], *, first_index: int | None = None) -> str:
    """Branch lines in the retsnoop/bpflbr format, oldest first.

    The first line carries `[#N]` with N the index of the oldest record (as in
    bpflbr, where records count down to 0 at the newest); inlined frames follow
    a line on indented continuation lines.
    """
    lines: list[str] = []
    top = len(branches) - 1 if first_index is None else first_index
    for i, b in enumerate(branches):
        prefix = f"[#{top:02d}] " if i == 0 else ""
        lines.append(f"{prefix}{b}")
        for loc in (b.src, b.dst):
            for frame in loc.inlined:
                where = f" ({frame.file}:{frame.line or 0})" if frame.file else ""
                lines.append(f"    . inlined {frame.function}{where}")
    return "\n".join(lines)


def format_hit_header(hit: Hit) -> str:
    """The line that introduces a hit, as bpflbr prints it."""
    ret = "" if hit.retval is None else f" retval={hit.retval}"
    comm = f" comm={hit.comm}" if hit.comm else ""
    irq = " in_interrupt" if hit.in_interrupt else ""
    return (
        f"Hit at {hit.target}: cpu={hit.cpu} pid={hit.pid} tid={hit.tid}{comm}{irq}{ret} "
        f"branches={len(hit.branches)}"
    )


def edge_list(trace: TraceText) -> str:
    """The whole trace as branch records: a header line per hit, then its branches
    (`trace.edges()`; the format of retsnoop and bpflbr)."""
    out = trace_header(trace)
    for hit in trace.hits:
        out.append(format_hit_header(hit))
        if hit.branches:
            out.append(format_branches(hit.branches))
    return "\n".join(out)
