"""Flame graphs of traced calls: folded stacks, and an inline SVG for the HTML report.

A traced connect is thousands of call edges: too many to read, easy to look at. Each
call a hit recorded becomes one sample of its stack (``target;caller;...;callee``), so
a frame's width is the number of calls made at or under it. The folded form is the
one flame-graph tools read (Brendan Gregg's flamegraph.pl, speedscope, inferno): one
``stack count`` line per distinct stack. Call traces have no durations: widths count
calls, not time.

The SVG is static (no script, no fonts or styles fetched): a `<title>` on each frame is
the tooltip a browser shows.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from pytest_lbr.model import CALL_KINDS, FRAME_KINDS

__all__ = ["FLAME_WIDTH", "flame_svg", "folded_lines", "folded_stacks", "stacks_of"]

#: Width of the SVG in pixels; frames narrower than a pixel are not drawn.
FLAME_WIDTH = 1000
_ROW = 17
_CHAR = 7  # monospace 12px, approximately


def folded_stacks(hits: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Stack -> calls, from hits in the report's JSON form (`target` and
    `branches` rows of ``[kind, src symbol, src name, src source, dst symbol, ...]``)."""
    counts: Counter[str] = Counter()
    for hit in hits:
        stack = [_frame(hit["target"])]
        for kind, src, _sn, _ss, dst, _dn, _ds in hit["branches"]:
            if kind in FRAME_KINDS:
                if len(stack) == 1 and src and kind in CALL_KINDS:
                    stack.append(_frame(src))  # the traced function itself
                stack.append(_frame(dst or "?"))
                counts[";".join(stack)] += 1
            elif kind == "ret" and len(stack) > 2:
                stack.pop()
    return counts


def folded_lines(counts: Mapping[str, int]) -> str:
    """The folded-stack text flame-graph tools read, one ``stack count`` line each."""
    return "".join(f"{stack} {n}\n" for stack, n in sorted(counts.items()))


def _frame(name: str) -> str:
    # ';' separates frames and ' ' ends the stack in the folded format.
    return name.replace(";", ":").replace(" ", "_")


@dataclass
class _Frame:
    name: str
    total: int = 0
    children: dict[str, _Frame] = field(default_factory=dict)


def _tree(counts: Mapping[str, int]) -> _Frame:
    root = _Frame("all")
    for stack, n in counts.items():
        root.total += n
        node = root
        for name in stack.split(";"):
            node = node.children.setdefault(name, _Frame(name))
            node.total += n
    return root


def flame_svg(counts: Mapping[str, int], title: str = "calls") -> str:
    """An inline SVG flame graph (root at the bottom) of folded `counts`; "" if empty."""
    root = _tree(counts)
    if not root.total:
        return ""
    rows: list[tuple[int, float, float, _Frame]] = []  # depth, x, width, frame

    def place(node: _Frame, depth: int, x: float) -> None:
        width = FLAME_WIDTH * node.total / root.total
        if width < 1:
            return
        rows.append((depth, x, width, node))
        for child in sorted(node.children.values(), key=lambda c: c.name):
            place(child, depth + 1, x)
            x += FLAME_WIDTH * child.total / root.total

    place(root, 0, 0.0)
    depth = max(d for d, _, _, _ in rows) + 1
    height = depth * _ROW + 4
    out = [
        f'<svg class="flame" xmlns="http://www.w3.org/2000/svg" width="{FLAME_WIDTH}" '
        f'height="{height}" viewBox="0 0 {FLAME_WIDTH} {height}" role="img" '
        f'aria-label="flame graph of {escape(title)}">'
    ]
    for d, x, w, node in rows:
        y = height - (d + 1) * _ROW
        share = 100 * node.total / root.total
        tip = f"{node.name}: {node.total} {title} ({share:.1f}%)"
        out.append(
            f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.5):.1f}" '
            f'height="{_ROW - 1}" fill="{_colour(node.name)}"/>'
        )
        label = _fit(node.name, w)
        if label:
            out.append(f'<text x="{x + 3:.1f}" y="{y + 12}">{escape(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _fit(name: str, width: float) -> str:
    room = int((width - 6) // _CHAR)
    if room < 3:
        return ""
    return name if len(name) <= room else name[: room - 2] + ".."


def _colour(name: str) -> str:
    # Warm colours, stable per name, so a function keeps its colour across graphs.
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{80 + (h >> 8) % 130},{(h >> 16) % 60})"


def stacks_of(traces: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """Folded stacks of every hit of `traces` (the report's trace JSON)."""
    total: Counter[str] = Counter()
    for trace in traces:
        total.update(folded_stacks(trace["hits"]))
    return total
