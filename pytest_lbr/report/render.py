"""`--lbr-report=DIR`: each traced test's trace as text, and one HTML page per session.

Each test (in whichever xdist worker ran it) writes `DIR/<test>.txt` (the trace in
the retsnoop/bpflbr format, and any kernel splat the test caused) and
`DIR/.parts/<test>.json`; at the end of the session
the controller assembles `DIR/index.html` from the parts. The page is self-contained
(inline CSS and SVG, no script, no network): per test, the call tree as a diagram,
the branches with their source lines, for a golden mismatch both sides side by
side, and the kernel splats as the kernel printed them. Each traced test also gets
a flame graph on the page and its folded stacks in `DIR/<test>.folded`, the text
flame-graph tools (flamegraph.pl, speedscope, inferno) read.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_lbr.golden.storage import safe_file_name
from pytest_lbr.model import Trace
from pytest_lbr.model.text import CallFrame
from pytest_lbr.model.text import call_tree as call_tree_of
from pytest_lbr.report.flame import flame_svg, folded_lines, stacks_of

if TYPE_CHECKING:
    from pytest_lbr.golden.check import GoldenResult
    from pytest_lbr.report.record import TestRecord

__all__ = [
    "MAX_NODES",
    "MAX_ROWS",
    "call_tree",
    "frame_json",
    "render_html",
    "text_file",
    "trace_json",
    "tree_svg",
    "write_html",
    "write_test_files",
]

#: Diagram nodes and table rows per trace; the text file always has everything.
MAX_NODES = 250
MAX_ROWS = 400


def _file_stem(nodeid: str) -> str:
    return safe_file_name(nodeid.replace("::", "."))[:200]


def text_file(report_dir: Path, nodeid: str) -> Path:
    """Where a test's trace text goes."""
    return report_dir / f"{_file_stem(nodeid)}.txt"


def write_test_files(report_dir: Path, record: TestRecord, *, edges: bool = False) -> Path:
    """Write the test's trace text (call trees; `edges`: branch records) and kernel
    splats, and its part of the HTML page; return the text path."""
    stem = _file_stem(record.nodeid)
    (report_dir / ".parts").mkdir(parents=True, exist_ok=True)
    text_path = text_file(report_dir, record.nodeid)
    texts = [t.edges() if edges else str(t) for t in record.traces]
    texts += [f"# kernel splat\n{splat.text}" for splat in record.splats]
    text_path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    raw = [t.capture_text for t in record.traces if t.capture_text]
    if raw:
        # What the backend read, as it read it: the evidence behind a surprising trace.
        (report_dir / f"{stem}.capture.txt").write_text("\n".join(raw), encoding="utf-8")
    traces = [trace_json(t) for t in record.traces]
    stacks = stacks_of(traces)
    if stacks:
        (report_dir / f"{stem}.folded").write_text(folded_lines(stacks), encoding="utf-8")
    part = {
        "nodeid": record.nodeid,
        "outcome": record.outcome,
        "text": text_path.name,
        "traces": traces,
        "golden": [_golden_json(g) for g in record.golden],
        "splats": [splat.text for splat in record.splats],
        "splats_allowed": record.splats_allowed,
    }
    (report_dir / ".parts" / f"{stem}.json").write_text(json.dumps(part), encoding="utf-8")
    return text_path


def _golden_json(result: GoldenResult) -> dict[str, Any]:
    # The part files cross processes (xdist workers -> controller): plain data.
    return {
        "name": result.name,
        "path": str(result.path),
        "level": result.level,
        "status": result.status,
        "message": result.message,
        "expected": list(result.expected),
        "actual": list(result.actual),
    }


def _loc(loc: Any) -> list[Any]:
    return [loc.symbol, loc.name, loc.source]


def trace_json(trace: Trace) -> dict[str, Any]:
    """A trace as a report part keeps it: its hits' branches and call trees."""
    return {
        "targets": trace.targets,
        "backend": trace.backend,
        "kernel": trace.kernel_release,
        "lost": trace.lost,
        "notes": trace.notes,
        "hits": [
            {
                "target": h.target,
                "cpu": h.cpu,
                "pid": h.pid,
                "tid": h.tid,
                "retval": h.retval,
                "branches": [[b.kind, *_loc(b.src), *_loc(b.dst)] for b in h.branches],
                "tree": frame_json(call_tree_of(h)) if h.branches else None,
            }
            for h in trace.hits
        ],
    }


# -- the call tree diagram --------------------------------------------------------


@dataclass
class Node:
    """A call in the diagram: the text's `CallFrame` as the report part keeps it (JSON);
    `count` > 1 when identical calls in a row were folded."""

    name: str
    label: str = ""
    children: list[Node] = field(default_factory=list)
    count: int = 1
    new: bool = False


def frame_json(frame: CallFrame) -> dict[str, Any]:
    """A hit's call tree (`pytest_lbr.model.text.call_tree`) as the report part keeps it."""
    return {
        "name": frame.function,
        "label": frame.title,
        "count": frame.count,
        "children": [frame_json(c) for c in frame.children],
    }


def call_tree(hit: dict[str, Any]) -> Node:
    """The diagram's tree of one hit of a report part, under the target's label."""

    def node(d: dict[str, Any]) -> Node:
        return Node(d["name"], d["label"], [node(c) for c in d["children"]], count=d["count"])

    return Node(hit["target"], hit["target"], [node(hit["tree"])] if hit.get("tree") else [])


def _mark_new(node: Node, new_edges: set[tuple[str, str]]) -> None:
    for child in node.children:
        child.new = (node.name, child.name) in new_edges
        _mark_new(child, new_edges)


def tree_svg(root: Node) -> str:
    """An inline SVG of the call tree: one row per call, indented by depth, elbow lines."""
    rows: list[tuple[int, Node, int]] = []  # (depth, node, parent row)

    def walk(node: Node, depth: int, parent: int) -> None:
        if len(rows) >= MAX_NODES:
            return
        rows.append((depth, node, parent))
        me = len(rows) - 1
        for child in node.children:
            walk(child, depth + 1, me)

    walk(root, 0, -1)
    step, h, indent = 24, 18, 22
    width = max((10 + d * indent + 8 * len(_label(n)) + 24 for d, n, _ in rows), default=200)
    height = len(rows) * step + 12
    out = [
        f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="call tree">'
    ]
    for i, (depth, node, parent) in enumerate(rows):
        x, y = 10 + depth * indent, 6 + i * step
        if parent >= 0:
            px = 10 + rows[parent][0] * indent + 8
            py = 6 + parent * step + h
            out.append(f'<path d="M{px},{py} V{y + h // 2} H{x}" class="edge"/>')
        cls = "root" if parent < 0 else ("new" if node.new else "fn")
        w = 8 * len(_label(node)) + 14
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" class="{cls}"/>')
        out.append(f'<text x="{x + 7}" y="{y + 13}">{escape(_label(node))}</text>')
    if len(rows) >= MAX_NODES:
        out.append(f'<text x="10" y="{height - 2}">... diagram cut at {MAX_NODES} calls</text>')
    out.append("</svg>")
    return "".join(out)


def _label(node: Node) -> str:
    return (node.label or node.name) + (f" \u00d7{node.count}" if node.count > 1 else "")


# -- the page ------------------------------------------------------------------------

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px;border-top:1px solid #ccd;padding-top:10px}
.passed{color:#17803d} .failed{color:#c0262d} .skipped{color:#8a6d00}
.tag{display:inline-block;border-radius:3px;padding:0 6px;margin-left:6px;font-size:12px;background:#eef}
svg.tree text{font:12px monospace;fill:#102040}
svg.tree rect.fn{fill:#cfe3ff;stroke:#4a7bd0} svg.tree rect.root{fill:#2b4f8c;stroke:#2b4f8c}
svg.tree rect.root+text{fill:#fff} svg.tree rect.new{fill:#ffd3cc;stroke:#c0262d}
svg.tree path.edge{fill:none;stroke:#7a8aa8;stroke-width:1.2}
svg.flame{display:block;margin:4px 0} svg.flame text{font:12px monospace;fill:#1d2330;pointer-events:none}
svg.flame rect{stroke:#fff;stroke-width:0.5}
table{border-collapse:collapse;font:12px monospace;margin:6px 0} td,th{border:1px solid #dde;padding:1px 6px;text-align:left;vertical-align:top}
th{background:#f2f4f8} .src{color:#667}
td.del{background:#ffe3e0} td.ins{background:#defbe4} td.same{color:#555}
details{margin:4px 0} summary{cursor:pointer;color:#2b4f8c}
pre.splat{font:12px monospace;background:#fff4f2;border-left:3px solid #c0262d;padding:6px;overflow-x:auto}
"""


def write_html(report_dir: Path) -> Path | None:
    """Assemble `index.html` from the parts the tests wrote; None if nothing was traced."""
    parts_dir = report_dir / ".parts"
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(parts_dir.glob("*.json"))]
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "index.html"
    from pytest_lbr.coverage.html import section

    path.write_text(render_html(parts, section(report_dir)), encoding="utf-8")
    return path


def render_html(parts: list[dict[str, Any]], coverage: str = "") -> str:
    """The whole page for the given test parts (see `write_test_files`), then the
    `coverage` section (`pytest_lbr.coverage.html`)."""
    parts = sorted(parts, key=lambda p: p["nodeid"])
    traced = sum(1 for p in parts if p["traces"])
    splats = sum(1 for p in parts if p.get("splats"))
    heading = f"pytest-lbr: {traced} traced test(s)"
    if splats:
        heading += f", {splats} with a kernel splat"
    body = [f"<h1>{heading}</h1>"]
    if coverage:
        body.append('<p><a href="#coverage">Coverage of the BPF programs</a></p>')
    body.append(_index(parts))
    body.extend(_section(i, p) for i, p in enumerate(parts))
    body.append(coverage)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>pytest-lbr report</title><style>{_CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def _index(parts: list[dict[str, Any]]) -> str:
    items = []
    for i, p in enumerate(parts):
        golden = " ".join(
            f'<span class="tag">golden {escape(g.get("status", "?"))}</span>' for g in p["golden"]
        )
        items.append(
            f'<li><a href="#t{i}">{escape(p["nodeid"])}</a> '
            f'<span class="{escape(p["outcome"])}">{escape(p["outcome"])}</span>{golden}'
            + ('<span class="tag">kernel splat</span>' if p.get("splats") else "")
            + "</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _section(i: int, part: dict[str, Any]) -> str:
    out = [
        f'<h2 id="t{i}">{escape(part["nodeid"])} <span class="{escape(part["outcome"])}">'
        f'{escape(part["outcome"])}</span> <a href="{escape(part["text"])}" class="tag">text</a></h2>'
    ]
    allowed = part.get("splats_allowed")
    for splat in part.get("splats", []):
        note = " (allowed: allow_splat)" if allowed else ""
        out.append(
            f'<p class="{"skipped" if allowed else "failed"}">kernel splat during this test{note}</p>'
        )
        out.append(f'<pre class="splat">{escape(splat)}</pre>')
    new_edges: set[tuple[str, str]] = set()
    for g in part["golden"]:
        out.append(_golden(g))
        if g.get("status") == "mismatch":
            for line in set(g["actual"]) - set(g["expected"]):
                a, sep, b = line.partition(" -> ")
                if sep:
                    new_edges.add((a.split()[-1], b.split()[0]))
    for n, t in enumerate(part["traces"]):
        out.append(
            f"<p>trace {n + 1}: {escape(', '.join(t['targets']))} &middot; backend {escape(t['backend'])} "
            f"&middot; kernel {escape(t['kernel'] or '?')} &middot; {len(t['hits'])} hit(s) &middot; "
            f"lost {t['lost']}</p>"
        )
        for hit in t["hits"]:
            root = call_tree(hit)
            _mark_new(root, new_edges)
            out.append(tree_svg(root))
            out.append(_branches(hit))
    flame = flame_svg(stacks_of(part["traces"]))
    if flame:
        out.append(f"<details open><summary>flame graph (width: calls)</summary>{flame}</details>")
    return "".join(out)


def _branches(hit: dict[str, Any]) -> str:
    rows = hit["branches"]
    head = (
        f"<summary>{len(rows)} branches (cpu {hit['cpu']}, pid {hit['pid']}, tid {hit['tid']}"
        + (f", retval {hit['retval']}" if hit["retval"] is not None else "")
        + ")</summary><table><tr><th>#</th><th>kind</th><th>from</th><th>source</th>"
        "<th>to</th><th>source</th></tr>"
    )
    body = []
    top = len(rows) - 1
    for n, (kind, _s, sname, ssrc, _d, dname, dsrc) in enumerate(rows[:MAX_ROWS]):
        body.append(
            f"<tr><td>#{top - n:02d}</td><td>{escape(kind)}</td><td>{escape(sname)}</td>"
            f'<td class="src">{escape(ssrc or "")}</td><td>{escape(dname)}</td>'
            f'<td class="src">{escape(dsrc or "")}</td></tr>'
        )
    if len(rows) > MAX_ROWS:
        body.append(
            f'<tr><td colspan="6">... {len(rows) - MAX_ROWS} more in the text file</td></tr>'
        )
    opened = " open" if len(rows) <= 60 else ""  # short: show the branches right away
    return f"<details{opened}>" + head + "".join(body) + "</table></details>"


def _golden(g: dict[str, Any]) -> str:
    status = g.get("status", "?")
    head = f"<p>golden <b>{escape(status)}</b>: {escape(g['path'])}"
    if g.get("message") and status != "mismatch":
        head += f" &mdash; {escape(g['message'])}"
    head += "</p>"
    if status != "mismatch":
        return head
    rows = ["<table><tr><th>golden (expected)</th><th>this run</th></tr>"]
    sm = difflib.SequenceMatcher(a=g["expected"], b=g["actual"], autojunk=False)
    for op, a1, a2, b1, b2 in sm.get_opcodes():
        left, right = g["expected"][a1:a2], g["actual"][b1:b2]
        for k in range(max(len(left), len(right))):
            lcell = escape(left[k]) if k < len(left) else ""
            rcell = escape(right[k]) if k < len(right) else ""
            lcls, rcls = ("same", "same") if op == "equal" else ("del", "ins")
            rows.append(f'<tr><td class="{lcls}">{lcell}</td><td class="{rcls}">{rcell}</td></tr>')
    rows.append("</table>")
    return head + "".join(rows)
