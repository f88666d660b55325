"""`pytest-lbr selftest` in a guest: LBR items "not available" with the probe's reason,
the test program's JIT lines (its helper calls on their lines of bpf/lbr_selftest.bpf.c)
and the graph backend checked for real, the bundle written."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.capture.lbr.backend import LbrCapture
from pytest_lbr.kernel import perf
from pytest_lbr.selftest.program import CALLEES, load_program
from pytest_lbr.selftest.run import BUNDLE_JSON, BUNDLE_TEXT, LBR_ITEMS
from pytest_lbr.selftest.verdicts import FAIL, snapshot_depth
from pytest_lbr.targets import parse_targets
from tests.bpf.objects import selftest_call_lines
from tests.commands import PYTEST_LBR

pytestmark = pytest.mark.kernel

HAS_LBR = os.path.exists("/sys/bus/event_source/devices/cpu/caps/branches")
LINE = re.compile(r"^\[(pass|fail|not available)\] ([^:]+): (.*)$")


@pytest.mark.slow
def test_selftest_reports_every_item_and_writes_the_bundle(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    res = subprocess.run(
        [PYTEST_LBR, "selftest", "--out", str(out)], capture_output=True, text=True, timeout=1200
    )
    results = os.environ.get("PYTEST_LBR_RESULTS")
    if results:  # docs/lbr-hosts.md quotes it
        Path(results, "selftest.txt").write_text(res.stdout + "--- stderr\n" + res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    items = {m[2]: (m[1], m[3]) for m in map(LINE.match, res.stdout.splitlines()) if m}
    assert set(items) == {"LBR presence", "JIT lines", "graph backend", *LBR_ITEMS}
    csum, adjust = selftest_call_lines(*CALLEES)
    assert items["JIT lines"] == (
        "pass",
        f"calls in the JIT image: bpf_csum_diff at lbr_selftest.bpf.c:{csum}, "
        f"bpf_xdp_adjust_head at lbr_selftest.bpf.c:{adjust}; each line's text names its helper",
    )
    assert items["graph backend"] == (
        "pass",
        "lbr_selftest -> bpf_csum_diff, bpf_xdp_adjust_head seen (1 hit(s))",
    )
    if HAS_LBR:
        assert not [k for k, (status, _) in items.items() if status == "fail"], res.stdout
    else:
        # x86 TCG guests have no PMU; arm64 ones may have one, but no kernel gives
        # bpf_get_branch_snapshot() branch records off x86 (it returns -ENOENT there).
        reason = (
            "no PMU: perf_event_open(PERF_TYPE_HARDWARE"
            if os.uname().machine == "x86_64"
            else "this kernel has no branch snapshot for arm64: bpf_get_branch_snapshot() "
            "returned -ENOENT"
        )
        for name in ("LBR presence", *LBR_ITEMS):
            status, detail = items[name]
            assert status == "not available", (name, detail)
            assert detail.startswith(reason), detail
            assert "ENOENT" in detail, detail
    assert f"bundle: {out / BUNDLE_JSON} {out / BUNDLE_TEXT}" in res.stdout
    bundle = json.loads((out / BUNDLE_JSON).read_text())
    env = bundle["environment"]
    assert env["kernel"] == os.uname().release and env["machine"] == os.uname().machine
    assert env["cpu_model"] and env["config"]["CONFIG_BPF_SYSCALL"] == "y"
    assert {r["name"]: (r["status"], r["detail"]) for r in bundle["results"]} == items
    assert any(line.startswith("[ok] BTF") for line in bundle["doctor"])
    text = (out / BUNDLE_TEXT).read_text()
    assert all(f"[{s}] {n}: {d}" in text for n, (s, d) in items.items())


@pytest.mark.skipif(HAS_LBR, reason="this machine has LBR: the selftest itself runs this path")
def test_lbr_path_runs_on_the_selftest_program() -> None:
    # The LBR capture on real hooks with the branch events on a software clock
    # (no PMU here): the selftest's program takes an fexit, the hit comes with
    # the helper's -ENOENT and no records, and the depth verdict says so.
    with load_program() as prog:
        capture = LbrCapture(
            parse_targets([prog]), check=False, open_events=perf.software_branch_events
        )
        try:
            capture.start()
            assert prog.run().retval == 2  # XDP_PASS
            trace = capture.stop()
        finally:
            capture.close()
    (hit,) = trace.hits
    assert hit.retval == 2 and hit.raw_branches == []
    assert any(n.startswith("LBR: snapshot failed on 1 hits (-2)") for n in trace.notes), (
        trace.notes
    )
    depth = snapshot_depth([len(h.raw_branches) for h in trace.hits], None)
    assert depth.status == FAIL and depth.detail.startswith("every snapshot was empty")
