"""The results file (docs/results.md): written, read back, refused when foreign, and
summarised for CI job pages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_lbr.results import (
    GUEST_FILE,
    SCHEMA,
    GoldenRecord,
    GuestRecord,
    Results,
    ResultsError,
    SessionRecord,
    SplatRecord,
    TestResult,
    TraceRecord,
    append_record,
    guest_record,
    read_results,
    summary_markdown,
)

DIFF = (
    "--- test_connect_syscall.lbr\n+++ this run\n@@ -3,2 +3,1 @@\n"
    "-tcp_v4_connect -> secure_tcp_seq\n-tcp_v4_connect -> secure_tcp_ts_off\n"
    "+tcp_v4_connect -> secure_tcp_seq_and_ts_off\n"
)
SPLAT = SplatRecord("WARNING:lib/splat.c:12", "WARNING: CPU: 0 PID: 7 at splat_init+0x1d", "")


def _run(path: Path) -> None:
    append_record(path, SessionRecord("6.1.0-56-amd64", "x86_64", "graph", True, "", True))
    append_record(
        path,
        TestResult(
            "examples/connect/test_connect.py::test_connect_syscall",
            "failed",
            "golden trace mismatch: examples/connect/__lbr_golden__/...",
            1.5,
            traces=[TraceRecord(["kfunc:tcp_v4_connect"], "graph", 1, 0)],
            golden=[
                GoldenRecord(
                    "test_connect_syscall",
                    "__lbr_golden__/test_connect/test_connect_syscall.lbr",
                    "mismatched",
                    diff=DIFF,
                    recorded_release="6.1.0-50-amd64",
                    running_release="6.1.0-56-amd64",
                )
            ],
        ),
    )
    append_record(
        path,
        TestResult(
            "tests/test_x.py::test_needs_btf",
            "failed",
            "kernel test skipped in a pytest-lbr vm guest: no BTF",
            skip_became_failure=True,
        ),
    )
    append_record(path, TestResult("tests/test_x.py::test_ok", "passed"))
    append_record(path, SPLAT)


def test_records_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "results.jsonl"
    _run(path)
    res = read_results(path)
    assert res.session is not None and res.session.kernel_release == "6.1.0-56-amd64"
    assert [t.outcome for t in res.tests] == ["failed", "failed", "passed"]
    assert res.traced == 1
    ((nodeid, golden),) = res.mismatches()
    assert nodeid.endswith("test_connect_syscall") and golden.diff == DIFF
    assert golden.recorded_release == "6.1.0-50-amd64"
    assert res.splats == [SPLAT]
    # Every line is one JSON object that names the schema and version.
    for line in path.read_text().splitlines():
        data = json.loads(line)
        assert data["schema"] == SCHEMA and data["version"] == 1


def test_a_line_cut_short_at_the_end_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _run(path)
    with path.open("a") as out:
        out.write('{"schema": "pytest-lbr/res')  # the guest died mid-write
    assert len(read_results(path).tests) == 3


@pytest.mark.parametrize(
    "line,why",
    [
        ('{"schema": "pytest-lbr/results", "version": 99, "type": "test"}', "version 99"),
        ('{"schema": "other", "version": 1}', "not a pytest-lbr results record"),
        ('{"schema": "pytest-lbr/results", "version": 1, "type": "nope"}', "unknown record"),
        ('{"schema": "pytest-lbr/results", "version": 1, "type": "test"}', "malformed test"),
        ("not json", "not a JSON record"),
    ],
)
def test_foreign_lines_are_refused_with_file_and_line(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n" + '{"schema": "pytest-lbr/results", "version": 1, "type": ')
    with pytest.raises(ResultsError, match=f"{path}:1: .*{why}"):
        read_results(path)


def test_summary_shows_counts_mismatch_diff_splat_and_strict_skip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _run(path)
    text = summary_markdown({"6.1": read_results(path), "6.12": None})
    assert "| 6.1 (`6.1.0-56-amd64`) | 1 | 2 | 0 | 1 | 1 |" in text
    assert "| 6.12 | - | - | - | - | no results: the guest never reported |" in text
    assert "### FAILED `examples/connect/test_connect.py::test_connect_syscall`" in text
    assert "```diff\n" + DIFF.rstrip() + "\n```" in text
    assert "### Skips that became failures" in text
    assert "- `tests/test_x.py::test_needs_btf`: kernel test skipped" in text
    assert "### Kernel splats\n\n- WARNING: CPU: 0 PID: 7 at splat_init+0x1d" in text
    # The strict skip is listed once, as a skip, not again as a plain failure.
    assert text.count("test_needs_btf") == 1


def test_a_clean_run_has_only_its_table_row() -> None:
    res = Results(SessionRecord("6.12.117+deb12-amd64", "x86_64"), [TestResult("t::a", "passed")])
    text = summary_markdown({"6.12": res})
    assert "| 6.12 (`6.12.117+deb12-amd64`) | 1 | 0 | 0 | 0 | 0 |" in text
    assert "##" not in text.replace("# pytest-lbr results", "")


# -- a real run's records, summarised as pytest-lbr vm does -------------------------------

pytest_plugins = ["pytester"]

GUEST_SUITE = """
import pytest
from tracehelper import make_trace


def test_golden(lbr_golden):
    lbr_golden(make_trace(calls=CALLS))


@pytest.mark.kernel
def test_needs_what_this_kernel_lacks():
    pytest.skip("no BPF trampolines here")


def test_plain():
    pass
"""


def test_the_summary_of_a_guest_run_with_a_mismatch_a_splat_and_a_strict_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The records a real session writes in guest mode (a golden mismatch, a kernel test
    whose skip strict mode fails), a kernel splat the runner found in the guest's log,
    and the summary `pytest-lbr vm` writes, appended to $GITHUB_STEP_SUMMARY."""
    from pytest_lbr.kernel.kmsg import find_splats
    from pytest_lbr.vm.run import GuestResult, read_guest_results, write_summary
    from tests.test_plugin import TRACE_HELPER

    pytester.makepyfile(tracehelper=TRACE_HELPER)
    pytester.syspathinsert()
    root = tmp_path / "lbr-results"
    guest = root / "6.12"
    guest.mkdir(parents=True)
    monkeypatch.setenv("PYTEST_LBR_GUEST", "1")
    monkeypatch.setenv("PYTEST_LBR_RESULTS", str(guest))
    suite = GUEST_SUITE.replace("CALLS", "('rw_verify_area', 'write_null')")
    pytester.makepyfile(test_run=suite)
    pytester.runpytest("--lbr-golden-update", "-p", "no:cacheprovider").assert_outcomes(
        passed=2, failed=1
    )
    pytester.makepyfile(test_run=suite.replace("'write_null'", "'write_zero'"))
    pytester.runpytest(
        f"--lbr-results={guest / 'results.jsonl'}", "-p", "no:cacheprovider"
    ).assert_outcomes(passed=1, failed=2)
    data = Path(__file__).parent / "data" / "dmesg-6.12-warn.txt"
    splats = find_splats(data.read_text().splitlines())
    assert splats
    step = tmp_path / "step-summary.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))

    records = read_guest_results(guest)  # read once, as `pytest-lbr vm` does
    path = write_summary(root, [GuestResult("6.12", 1, guest, records, splats=splats[:1])])

    text = path.read_text()
    assert path == root / "summary.md"
    assert step.read_text() == "earlier step\n" + text
    release = os.uname().release
    assert f"| 6.12 (`{release}`) | 1 | 2 | 0 | 1 | 1 |" in text
    assert "### FAILED `test_run.py::test_golden`\n\ngolden trace mismatch: " in text
    assert "```diff\n" in text and "+vfs_write -> write_zero" in text
    assert "### Skips that became failures" in text
    assert "- `test_run.py::test_needs_what_this_kernel_lacks`: kernel test skipped" in text
    assert f"### Kernel splats\n\n- {splats[0].summary}" in text


def test_allowed_splats_are_listed_apart_never_as_failures(tmp_path: Path) -> None:
    """A splat a test marked `allow_splat` provoked on purpose: counted and listed as
    allowed; the failing splats' count and list leave it out."""
    path = tmp_path / "r.jsonl"
    append_record(path, SessionRecord("6.12.117+deb12-amd64", "x86_64", "graph", True))
    allowed = SplatRecord("k1", "WARNING: CPU: 0 PID: 9 at splat_write+0x1d", "t.py::a", True)
    append_record(path, TestResult("t.py::a", "passed", splats=[allowed]))
    res = read_results(path)
    assert res.tests[0].splats == [allowed]
    assert res.allowed_splats() == [allowed] and res.failing_splats() == []
    text = summary_markdown({"6.12": res})
    assert "| 6.12 (`6.12.117+deb12-amd64`) | 1 | 0 | 0 | 0 | 0 (+1 allowed) |" in text
    assert "### Kernel splats" not in text and "FAILED" not in text
    assert (
        "### Allowed kernel splats (`allow_splat`: provoked on purpose, not failures)\n\n"
        "- WARNING: CPU: 0 PID: 9 at splat_write+0x1d (in `t.py::a`)"
    ) in text
    # With a real failure beside it, each is listed in its own section.
    append_record(path, SPLAT)
    text = summary_markdown({"6.12": read_results(path)})
    assert "| 1 (+1 allowed) |" in text
    kernel, allowed_part = text.split("### Kernel splats\n\n", 1)[1].split("### Allowed", 1)
    assert kernel.strip() == f"- {SPLAT.title}"
    assert "splat_write" in allowed_part


def test_fields_a_newer_writer_added_are_ignored(tmp_path: Path) -> None:
    """Fields are only ever added within a version: a reader skips those it does not know."""
    path = tmp_path / "r.jsonl"
    record = {"schema": SCHEMA, "version": 1, "type": "test", "nodeid": "t::a"}
    record |= {"outcome": "passed", "flaky_reruns": 2}
    splat = {"schema": SCHEMA, "version": 1, "type": "splat", "key": "k", "title": "BUG: x"}
    path.write_text(json.dumps(record) + "\n" + json.dumps(splat | {"cpu": 1}) + "\n")
    res = read_results(path)
    assert res.tests == [TestResult("t::a", "passed")]
    assert res.splats == [SplatRecord("k", "BUG: x")]


def test_a_guest_record_reads_back_and_explains_missing_results(tmp_path: Path) -> None:
    guest = tmp_path / "6.12"
    record = GuestRecord(
        "6.12",
        "/boot/vmlinuz-6.12.117+deb12-amd64",
        "no_boot",
        error="guest did not boot within 300s",
    )
    append_record(guest / GUEST_FILE, record)
    assert guest_record(guest) == record
    assert guest_record(tmp_path / "none") is None
    text = summary_markdown({"6.12": Results(guest=record)})
    assert "| 6.12 | - | - | - | - | no results: guest did not boot within 300s |" in text


def test_properties_a_test_records_are_in_its_record(pytester: pytest.Pytester) -> None:
    """`record_property` values reach the results file (the conformance table reads them)."""
    pytester.makepyfile(
        test_props="""
def test_typed(record_property):
    record_property("program_type", "lsm")
    record_property("count", 3)


def test_plain():
    pass
"""
    )
    out = pytester.path / "results.jsonl"
    pytester.runpytest(f"--lbr-results={out}", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    tests = {t.nodeid: t for t in read_results(out).tests}
    assert tests["test_props.py::test_typed"].properties == {"program_type": "lsm", "count": "3"}
    assert tests["test_props.py::test_plain"].properties == {}
