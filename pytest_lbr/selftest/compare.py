"""Agreement on a user's own suite: two `--lbr-report` directories, LBR against graph.

Run the suite once with `--lbr-backend=lbr --lbr-report=A` and once with
`--lbr-backend=graph --lbr-report=B`; `compare_reports(A, B)` gives one result per
test both ran: every LBR call edge made by a function the graph trace saw running
must be in the graph trace. LBR edges made by functions the graph trace never saw
are not compared: the LBR also records what ran before the hook fired, which the
graph backend (armed around the target only) does not claim to see.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_lbr.model import CALL_KINDS
from pytest_lbr.selftest.verdicts import FAIL, Result, edge_agreement, not_available

__all__ = ["ReportError", "compare_reports", "report_edges"]


class ReportError(ValueError):
    """A directory that is not a usable `--lbr-report` directory: one line with the fix."""


def _parts(report: Path, backend: str) -> dict[str, list[dict[str, Any]]]:
    parts = report / ".parts"
    if not parts.is_dir():
        raise ReportError(
            f"{report} is not a trace report directory (no .parts/): write one with "
            f"pytest --lbr --lbr-backend={backend} --lbr-report={report}"
        )
    tests: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(parts.glob("*.json")):
        try:
            part = json.loads(path.read_text(encoding="utf-8"))
            tests[part["nodeid"]] = part["traces"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"{path}: unreadable report part ({exc}): re-run the suite") from None
    return tests


def report_edges(traces: list[dict[str, Any]]) -> tuple[set[tuple[str, str]], set[str]]:
    """(caller, callee) call edges of a test's report traces, and the backends they came from."""
    edges: set[tuple[str, str]] = set()
    backends = set()
    for trace in traces:
        backends.add(trace.get("backend", ""))
        for hit in trace.get("hits", []):
            for kind, src, _sn, _ss, dst, *_ in hit.get("branches", []):
                if kind in CALL_KINDS:
                    edges.add((src or "?", dst or "?"))
    return edges, backends


def compare_reports(lbr_report: Path, graph_report: Path) -> list[Result]:
    """One result per traced test of the two reports (see the module docstring)."""
    lbr_tests, graph_tests = _parts(lbr_report, "lbr"), _parts(graph_report, "graph")
    results = []
    for nodeid in sorted(set(lbr_tests) | set(graph_tests)):
        if nodeid not in lbr_tests or nodeid not in graph_tests:
            side = graph_report if nodeid not in graph_tests else lbr_report
            results.append(not_available(nodeid, f"not traced in {side}"))
            continue
        lbr_edges, lbr_backends = report_edges(lbr_tests[nodeid])
        graph_edges, graph_backends = report_edges(graph_tests[nodeid])
        if lbr_backends != {"lbr"} or graph_backends != {"graph"}:
            results.append(
                Result(
                    nodeid,
                    FAIL,
                    f"backends {sorted(lbr_backends)} vs {sorted(graph_backends)}: "
                    "the first report must come from --lbr-backend=lbr, the second from graph",
                )
            )
            continue
        ran = {f for edge in graph_edges for f in edge}
        checked = {e for e in lbr_edges if e[0] in ran}
        if not checked:
            results.append(
                not_available(nodeid, "no LBR call edge made by a function the graph trace saw")
            )
            continue
        skipped = len(lbr_edges) - len(checked)
        what = "the test" + (f" ({skipped} made before the hook not compared)" if skipped else "")
        results.append(edge_agreement(nodeid, checked, graph_edges, what))
    return results
