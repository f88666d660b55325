"""bench/: the statistics and table helpers, the report, and that every script parses its args.

No timing assertions: the benchmarks themselves run under bench/run, not in CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import attach  # noqa: E402
import common  # noqa: E402
import graph_overhead  # noqa: E402
import pertest  # noqa: E402
import startup  # noqa: E402
import suite  # noqa: E402
import throughput  # noqa: E402


def test_stat_median_min_max() -> None:
    s = common.stat([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.lo, s.hi, s.n) == (2.5, 1.0, 10.0, 4)
    with pytest.raises(ValueError):
        common.stat([])


def test_fmt_stat() -> None:
    assert common.fmt_stat([1.0, 2.0, 4.0]) == "2.000 (1.000-4.000)"
    assert common.fmt_stat([0.5]) == "0.500 (1 run)"
    assert common.fmt_stat([]) == "-"
    assert common.fmt_stat([12345.0, 20000.0], 0) == "16,172 (12,345-20,000)"


def test_ratio_of_medians() -> None:
    assert common.ratio([1.0, 2.0, 9.0], [4.0, 4.0, 100.0]) == 0.5
    assert common.ratio([], [1.0]) is None
    assert common.ratio([1.0], [0.0]) is None
    assert common.fmt_ratio(0.123456, 3) == "0.123x"
    assert common.fmt_ratio(None) == "-"


def test_verdict() -> None:
    assert common.verdict(0.2, 0.25) == "met"
    assert common.verdict(0.3, 0.25) == "missed"
    assert common.verdict(25.0, 20.0, at_most=False) == "met"
    assert common.verdict(5.0, 20.0, at_most=False) == "missed"
    assert common.verdict(None, 1.0) == "not measured"


def test_markdown_table() -> None:
    text = common.markdown_table(["a", "b"], [[1, "x|y"], ["z", 2.5]])
    assert text.splitlines() == ["| a | b |", "| --- | --- |", "| 1 | x\\|y |", "| z | 2.5 |"]
    with pytest.raises(ValueError):
        common.markdown_table(["a", "b"], [[1]])


def test_save_and_load_json(tmp_path: Path) -> None:
    out = tmp_path / "x" / "r.json"
    common.save_json(out, {"benchmark": "t", "v": [1, 2]})
    data = common.load_json(out)
    assert data is not None and data["v"] == [1, 2] and data["machine"]["kernel"]
    assert common.load_json(tmp_path / "missing.json") is None


@pytest.mark.parametrize(
    ("module", "argv", "check"),
    [
        (startup, ["--runs", "2", "--tests", "7"], {"runs": 2, "tests": 7}),
        (attach, ["--glob", "tcp_*", "--glob", "ext4_*"], {"glob": ["tcp_*", "ext4_*"]}),
        (pertest, ["--runs", "4"], {"runs": 4}),
        (throughput, ["--hits", "100", "--steps", "2"], {"hits": 100, "steps": 2}),
        (graph_overhead, ["--writes", "10", "--out", "/tmp/x.json"], {"writes": 10}),
        (suite, ["--quick", "--skip-guest", "--runs", "5"], {"quick": True, "runs": 5}),
    ],
)
def test_scripts_parse_args(module: object, argv: list[str], check: dict[str, object]) -> None:
    args = module.parse_args(argv)  # type: ignore[attr-defined]
    for key, value in check.items():
        assert getattr(args, key) == value
    with pytest.raises(SystemExit):
        module.parse_args(["--no-such-option"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "script", ["startup", "attach", "pertest", "throughput", "graph_overhead", "suite"]
)
def test_scripts_help(script: str) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--runs" in out.stdout


def test_bench_run_is_the_suite() -> None:
    out = subprocess.run(
        [str(BENCH / "run"), "--help"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and "--skip-guest" in out.stdout


def test_write_suite_has_no_traced_tests(tmp_path: Path) -> None:
    path = startup.write_suite(tmp_path / "s", 5)
    text = path.read_text()
    assert text.count("def test_") == 5 and "lbr" not in text


def test_graph_body_writes(tmp_path: Path) -> None:
    assert graph_overhead.body(3) >= 0
    out = subprocess.run(
        [sys.executable, "-c", graph_overhead.BODY, "5"], capture_output=True, text=True
    )
    assert float(out.stdout.strip()) >= 0


SYMBOLIZE_TABLE = """# Symbolization benchmark

vmlinux: `x`; median of 3 runs (min-max)

| method | 32 addrs | 1,000 addrs |
| --- | ---: | ---: |
| pytest-lbr cold | 1.853 (1.000-2.000) | 3.763 (1 run) |
| pytest-lbr warm (disk cache) | 0.010 (0.009-0.020) | 0.077 (1 run) |
| llvm-symbolizer --inlining | 0.449 (0.400-0.500) | 5.263 (1 run) |
| addr2line -i -f | 2.640 (1 run) | - |
"""


def test_parse_symbolize_table() -> None:
    t = suite.parse_symbolize_table(SYMBOLIZE_TABLE)
    assert t["pytest-lbr cold"] == {32: 1.853, 1000: 3.763}
    assert t["llvm-symbolizer --inlining"][1000] == 5.263
    assert t["addr2line -i -f"] == {32: 2.64}


def test_parse_symbolize_table_reads_symbolize_py_output(tmp_path: Path) -> None:
    """The parser keeps up with the table bench/symbolize.py actually prints."""
    symbolize = pytest.importorskip("symbolize")
    rows = [("pytest-lbr cold", 32, [1.0, 2.0, 3.0]), ("llvm-symbolizer", 32, [0.5])]
    text = symbolize._table(rows, 3, __file__)
    t = suite.parse_symbolize_table(text)
    assert t == {"pytest-lbr cold": {32: 2.0}, "llvm-symbolizer": {32: 0.5}}


def _session(offered: float | None, truth: int, delivered: int, lost: int) -> dict[str, object]:
    s = throughput.Session(offered, "stream")
    s.truth, s.delivered, s.lost, s.seconds = truth, delivered, lost, 1.0
    return s.as_dict()


def test_session_accounting() -> None:
    ok = _session(None, 100, 90, 10)
    bad = _session(None, 100, 90, 0)
    assert ok["accounted"] and ok["true_loss"] == 10
    assert not bad["accounted"] and bad["true_loss"] == 10


def test_render_report_verdicts(tmp_path: Path) -> None:
    machine = {"kernel": "6.12.1", "machine": "x86_64", "cpu": "c", "cpus": 2, "load": 1.0}
    host = {**machine, "guest": False}
    guest = {**machine, "guest": True}
    (tmp_path / "startup.json").write_text(
        json.dumps(
            {
                "machine": host,
                "tests": 50,
                "seconds": {"plain": [1.0], "installed": [1.0], "--lbr": [1.05]},
                "cpu_seconds": {"plain": [1.0], "installed": [1.0], "--lbr": [1.2]},
                "ratio_lbr_vs_plain": 1.05,
                "cpu_ratio_lbr_vs_plain": 1.2,
            }
        )
    )
    ours = {"functions": 380, "how": "kprobe.multi", "arm": [0.5], "disarm": [0.1], "total": [0.6]}
    bt = {"baseline": [3.0], "kfunc_net": [7.0], "kprobe_net": [9.0], "probes": {}, "errors": {}}
    (tmp_path / "attach.json").write_text(
        json.dumps(
            {
                "machine": guest,
                "globs": {
                    "tcp_*": {
                        "ours": ours,
                        "bpftrace": bt,
                        "ratio_vs_kfunc": 0.6 / 7,
                        "ratio_vs_kprobe": 0.6 / 9,
                    }
                },
            }
        )
    )
    flat = _session(None, 1000, 900, 0)
    (tmp_path / "throughput.json").write_text(
        json.dumps(
            {
                "machine": guest,
                "burst": [_session(None, 100, 100, 0)],
                "burst_capacity": 100,
                "flat_out": [flat],
                "max_attempted_per_s": 1000.0,
                "loss_free_rate": None,
                "accounted_runs": 1,
                "total_runs": 2,
            }
        )
    )
    sym = tmp_path / "sym.md"
    sym.write_text(SYMBOLIZE_TABLE)
    text = suite.render(tmp_path, sym)
    lines = {ln.split("|")[1].strip(): ln for ln in text.splitlines() if ln.startswith("| ")}
    assert "| met |" in lines["arm kfunc:tcp_* (380 functions)"]
    assert "| missed |" in lines["pytest --lbr start-up, 50 untraced tests"]
    assert "| missed |" in lines["trace.lost == true loss"]
    assert "1/2 runs" in lines["trace.lost == true loss"]
    # cold 1.853 / llvm 0.449 = 4.1x: missed; warm 0.449 / 0.010 = 44.9x faster: met.
    assert "| missed |" in lines["symbolize 32 addrs, cold"]
    assert "44.9x faster | met |" in lines["symbolize 32 addrs, warm"]
    assert "only the ratios mean anything" in text
    assert "## 5. Graph backend overhead (6.12 guest)\n\nNot run." in text


def test_render_bisect_section(tmp_path: Path) -> None:
    record = tmp_path / "RESULTS-bisect.md"
    text = suite.render(tmp_path, tmp_path / "no-sym.md", record)
    assert text.endswith("## 8. Kernel bisection (issue 16)\n\nNot run.\n")
    record.write_text("# One session (today)\n\nIt named the commit.\n\n| what | wall time |\n")
    text = suite.render(tmp_path, tmp_path / "no-sym.md", record)
    assert text.endswith(
        "## 8. Kernel bisection (issue 16)\n\n"
        "From bench/RESULTS-bisect.md (One session (today); not part of bench/run):\n\n"
        "It named the commit.\n\n| what | wall time |\n"
    )


def test_guest_benchmarks_skip_on_host() -> None:
    import guest_bench

    assert set(guest_bench.GUEST_BENCHMARKS) == {
        "pertest",
        "graph_overhead",
        "throughput",
        "attach",
    }


def test_render_coverage_section_and_target(tmp_path: Path) -> None:
    record = tmp_path / "RESULTS-coverage.json"
    text = suite.render(tmp_path, tmp_path / "no-sym.md", tmp_path / "no-bisect.md", record)
    assert "## 7. Coverage cost (6.1 and 6.12 guests)\n\nNot run.\n" in text
    run = {
        "machine": {"date": "2026-11-28 07:00 UTC"},
        "seconds": {"traced": [100.0], "coverage": [112.0], "spent": [11.2]},
        "ratio": 1.12,
        "added": 112.0 / 100.8,
        "programs_in_table": 10,
    }
    record.write_text(json.dumps({"kernels": {"6.1": {**run, "added": 1.05}, "6.12": run}}))
    text = suite.render(tmp_path, tmp_path / "no-sym.md", tmp_path / "no-bisect.md", record)
    lines = {ln.split("|")[1].strip(): ln for ln in text.splitlines() if ln.startswith("| ")}
    # Judged on coverage's own work, not on the run against run ratio.
    met = "| <= 1.10x the traced suite | 1.050x (its own work; run against run 1.120x) | met |"
    assert met in lines["--lbr-cov on the traced examples (6.1)"]
    missed = "| 1.111x (its own work; run against run 1.120x) | missed | see section 7"
    assert missed in lines["--lbr-cov on the traced examples (6.12)"]
    row = "| 6.12 | 2026-11-28 07:00 UTC | 100.0 (1 run) | 112.0 (1 run) | 1.120x | 11.20 (1 run) "
    assert row + "| 1.111x | 10 |" in text
