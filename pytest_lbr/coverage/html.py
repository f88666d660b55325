"""Coverage in the HTML report (`--lbr-report` with `--lbr-cov`): each program's source
with its lines marked.

The session writes its programs' coverage into the report directory
(`write_part`, a `coverage` record per program); the report page puts
`section(report_dir)` after the tests. A line with code is marked `executed`
(LBR records show it), `proven` (the control flow proves it), `counted N` (exact
mode's counters: N runs) or `not observed` (`not run` where counters say so),
with the tests that ran it (folded: "2 test(s)"); lines without code are shown
plain. The source is read when the page is built, from the working directory
(where the programs' paths are relative to).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from pathlib import Path

from pytest_lbr.coverage.book import COUNTED, EXECUTED, PROVEN, ProgramCoverage

__all__ = ["PART", "section", "write_part"]

#: The coverage part of a report directory, beside the tests' parts.
PART = Path(".parts") / "coverage"  # not *.json: those are the tests' parts
#: Lines of context shown around a program's code.
_CONTEXT = 2

_CSS = """
table.cov{border-collapse:collapse;font:12px monospace;margin:4px 0 12px}
table.cov td{padding:0 6px;white-space:pre;vertical-align:top}
table.cov td.n{color:#777;text-align:right}
tr.executed td.src,tr.counted td.src{background:#d7f5d7} tr.proven td.src{background:#e6f0ff}
tr.not-observed td.src,tr.not-run td.src{background:#ffe3e0} td.how{color:#555}
td.tests details{display:inline} td.tests summary{color:#555;cursor:pointer}
td.tests ul{margin:0;padding-left:14px;font-size:11px}
"""


def write_part(report_dir: Path, programs: Sequence[ProgramCoverage]) -> Path:
    """Save the programs' coverage for the page (replacing an earlier one)."""
    path = report_dir / PART
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([p.to_record() for p in programs]), encoding="utf-8")
    return path


def section(report_dir: Path, cwd: Path | None = None) -> str:
    """The page's coverage section ("" when the session wrote no coverage)."""
    try:
        records = json.loads((report_dir / PART).read_text(encoding="utf-8"))
    except OSError:
        return ""
    base = cwd or Path.cwd()
    programs = [ProgramCoverage.from_record(r) for r in records]
    out = [f"<style>{_CSS}</style>", '<h2 id="coverage">Coverage of the BPF programs</h2>']
    if not programs:
        out.append("<p>No BPF program was traced.</p>")
    for cov in programs:
        out.append(_program(cov, base))
    return "".join(out)


def _program(cov: ProgramCoverage, base: Path) -> str:
    total = len(cov.lines)
    covered = sum(1 for n in cov.lines.values() if n)
    out = [
        f'<h3>{escape(cov.program)} <span class="tag">{covered} of {total} lines '
        f"covered; {cov.runs} run(s)</span></h3>"
    ]
    if cov.cut_by_window:
        out.append(
            f"<p>{cov.cut_by_window} of {cov.runs} runs were cut by the LBR window: only "
            "what their records show is counted.</p>"
        )
    for file in cov.files():
        out.append(f"<p><code>{escape(file)}</code></p>")
        out.append(_source(cov, file, base))
    return "".join(out)


def _tests(tests: Sequence[str]) -> str:
    """Which tests ran a line, as coverage.py's `show_contexts` shows them: folded
    under their number."""
    if not tests:
        return ""
    names = "".join(f"<li>{escape(t or '(outside any test)')}</li>" for t in tests)
    return f"<details><summary>{len(tests)} test(s)</summary><ul>{names}</ul></details>"


def _source(cov: ProgramCoverage, file: str, base: Path) -> str:
    lines = cov.file_lines(file)
    try:
        text = (base / file).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"<p>source not readable here: {escape(exc.strerror or str(exc))}</p>"
    first = max(1, min(lines) - _CONTEXT) if lines else 1
    last = min(len(text), max(lines) + _CONTEXT) if lines else len(text)
    rows = []
    for n in range(first, last + 1):
        src = escape(text[n - 1]) if n <= len(text) else ""
        if n not in lines:
            rows.append(
                f'<tr><td class="n">{n}</td><td class="how"></td><td class="src">{src}</td>'
                '<td class="tests"></td></tr>'
            )
            continue
        how = cov.how.get((file, n), "")
        label = {EXECUTED: "executed", PROVEN: "proven", COUNTED: "counted"}.get(how, "covered")
        cls = label
        if how == COUNTED:
            label = f"counted {lines[n]}"
        if not lines[n]:  # counters see every run: what they did not count did not run
            label = "not run" if cov.all_runs_attributed else "not observed"
            cls = label.replace(" ", "-")
        rows.append(
            f'<tr class="{cls}"><td class="n">{n}</td><td class="how">{label}</td>'
            f'<td class="src">{src}</td><td class="tests">{_tests(cov.tests_of((file, n)))}</td>'
            "</tr>"
        )
    return '<table class="cov">' + "".join(rows) + "</table>"
