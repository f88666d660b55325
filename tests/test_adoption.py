"""A new user's path, end to end, in real guests.

The wheel is built from this tree, installed into a fresh venv in a temporary
directory outside the checkout, and used by a small third-party project written
here: its own XDP program (compiled by this test with clang), its own tests and a
golden file. The project runs through `pytest-lbr vm` from its own directory, in
the 6.1 and 6.12 guests, exactly as docs/ci.md tells users to: slow (three
guest boots, two at a time).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_lbr import vm
from pytest_lbr.vm import VmError, resolve_kernel

REPO = Path(__file__).resolve().parents[1]
#: What a user's CI runs in each guest (docs/ci.md runs the same, checked below).
PYTEST_ARGS = ["tests", "--lbr"]

COUNTER_C = r"""
// SPDX-License-Identifier: GPL-2.0
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* Counts packets by length; a length nobody registered is dropped. */
SEC("xdp")
int count_packets(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u64 *n = bpf_map_lookup_elem(&counts, &len);

	if (!n)
		return XDP_DROP;
	__sync_fetch_and_add(n, 1);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
"""

TEST_COUNTER = """
import errno
import os

import pytest

# The harness's public path, as a project imports it (`pytest_lbr.bpf`).
from pytest_lbr.bpf import BpfObject, Program

# xdist_group: with `-n 2 --dist loadgroup` the tests that boot guests share one worker
# (pytest 8). ci/test runs this module on its own, beside the kernel guests.
pytestmark = [pytest.mark.kernel, pytest.mark.xdist_group("guests")]

XDP_PASS = 2
PACKET = bytes(64)


def load(bpf, path="build/counter.bpf.o"):
    obj = bpf.load(path)
    assert isinstance(obj, BpfObject) and isinstance(obj.programs["count_packets"], Program)
    obj.maps["counts"].update((64).to_bytes(4, "little"), (0).to_bytes(8, "little"))
    return obj, obj.programs["count_packets"]


def test_counts_through_the_map(bpf, lbr):
    obj, prog = load(bpf)  # relative to this test module's directory
    with lbr.trace(prog) as trace:
        res = prog.run(data=PACKET)
    assert res.retval == XDP_PASS
    assert int.from_bytes(obj.maps["counts"].lookup((64).to_bytes(4, "little")), "little") == 1
    assert trace.called("__htab_map_lookup_elem", by="count_packets")
    lbr.check_golden(trace)


def test_path_from_the_working_directory(bpf):
    obj, prog = load(bpf, "tests/build/counter.bpf.o")
    assert prog.run(data=PACKET).retval == XDP_PASS


def test_the_wheels_lbr_tracer_attaches_and_says_why_no_branches(bpf, lbr):
    from pytest_lbr.capture.hooks.hook_set import HookSet
    from pytest_lbr.capture.hooks.tracer_object import tracer_object
    from pytest_lbr.targets import parse_target

    assert "site-packages" in str(tracer_object())  # the wheel's own object
    obj, prog = load(bpf)
    with HookSet([parse_target(prog)], snapshot=True) as hooks:
        prog.run(data=PACKET)
        hits = [h for h in hooks.drain() if h.pid == os.getpid()]
    assert len(hits) == 1
    # No PMU under TCG: bpf_get_branch_snapshot() itself answers -ENOENT.
    assert hits[0].snapshot_ret == -errno.ENOENT
    from pytest_lbr.tracer import TracingUnavailable

    with pytest.raises(TracingUnavailable, match="lbr backend unavailable: no PMU.*ENOENT"):
        with lbr.trace(prog, backend="lbr"):
            pass


def test_deliberately_skipped():
    pytest.skip("this kernel test skips on purpose: strict guests must fail it")
"""


def _kernels_or_skip() -> None:
    for series in ("6.1", "6.12"):
        try:
            resolve_kernel(series)
        except VmError as exc:
            pytest.skip(str(exc))
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (it builds the wheel's tracer and the project)")


def _run(cmd: list[str], cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{cmd[0].rsplit('/', 1)[0]}:{env.get('PATH', '')}"
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(venv bin dir, project dir): the wheel installed, the project written and built."""
    _kernels_or_skip()
    top = tmp_path_factory.mktemp("adoption")
    dist = top / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("pytest_lbr-*-py3-none-any.whl")
    venv = top / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[vm]"], capture_output=True, text=True
    )
    assert pip.returncode == 0, pip.stderr[-3000:]

    project = top / "project"
    (project / "tests").mkdir(parents=True)
    (project / "bpf").mkdir()
    (project / "bpf" / "counter.bpf.c").write_text(COUNTER_C)
    (project / "tests" / "test_counter.py").write_text(TEST_COUNTER)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True)
    (project / "tests" / "build").mkdir()
    cc = [
        "clang", "-g", "-O2", "-target", "bpf", "-c", "bpf/counter.bpf.c",
        "-idirafter", f"/usr/include/{multiarch.stdout.strip() or 'x86_64-linux-gnu'}",
        "-o", "tests/build/counter.bpf.o",
    ]  # fmt: skip
    subprocess.run(cc, cwd=project, check=True)
    return venv / "bin", project


@pytest.mark.slow
def test_a_third_party_project_runs_in_both_guests(user: tuple[Path, Path]) -> None:
    bindir, project = user
    exe = str(bindir / "pytest-lbr")
    # The doctor in a guest, while the golden trace is recorded in another (two cores).
    doctor: dict[str, subprocess.CompletedProcess[str]] = {}
    thread = threading.Thread(
        target=lambda: doctor.setdefault(
            "out",
            _run(
                [
                    exe,
                    "vm",
                    "--kernel",
                    "6.12",
                    "--results",
                    "doctor",
                    "--exec",
                    "pytest-lbr doctor",
                ],
                project,
            ),
        )
    )
    thread.start()
    record = _run(
        [exe, "vm", "--kernel", "6.1", "--rw", "tests", "--results", "record", "--",
         "--lbr", "--lbr-golden-update", "-k", "counts_through"],
        project,
    )  # fmt: skip
    thread.join()
    assert record.returncode == 0, record.stdout[-3000:] + record.stderr[-3000:]
    golden = (
        project / "tests" / "__lbr_golden__" / "test_counter" / "test_counts_through_the_map.lbr"
    )
    assert "count_packets -> __htab_map_lookup_elem" in golden.read_text()

    out = doctor["out"]
    text = out.stdout + out.stderr
    assert "FileNotFoundError" not in text and "Traceback" not in text, text[-3000:]
    assert re.search(r"fentry.*fexit program on vfs_write loads", text), text[-3000:]
    assert "no PMU" in text and "ENOENT" in text, text[-3000:]
    assert "=> tracing works here: backend graph" in text, text[-3000:]

    run = _run(
        [exe, "vm", "--kernel", "6.1", "--kernel", "6.12", "--", *PYTEST_ARGS, "-rA"], project
    )
    text = run.stdout + run.stderr
    assert run.returncode == 1, text[-5000:]  # only the deliberate skip fails
    for kernel in ("6.1", "6.12"):
        # node ids as on the host, the golden file matched, the skip failed (strict)
        assert f"[{kernel}] PASSED tests/test_counter.py::test_counts_through_the_map" in text, (
            text[-5000:]
        )
        assert (
            f"[{kernel}] PASSED tests/test_counter.py::test_path_from_the_working_directory" in text
        )
        assert (
            f"[{kernel}] PASSED tests/test_counter.py::test_the_wheels_lbr_tracer_attaches_and_says_why_no_branches"
            in text
        )
        assert f"[{kernel}] FAILED tests/test_counter.py::test_deliberately_skipped" in text
        assert (
            f"[vm] {kernel}: 3 passed, 1 failed, 0 skipped; ran with tracing: 2, "
            "ran marked kernel: 4 (exit 1;" in text
        )
        results = project / "lbr-results" / kernel
        assert (results / "junit.xml").exists() and (results / "dmesg.txt").exists()
        assert (results / "report" / "index.html").exists()
    assert not (bindir.parent / "lib" / "results").exists()


def _doc_commands(workflow: str) -> list[list[str]]:
    """The `pytest-lbr vm` commands of a CI file, with its matrix variables filled in."""
    values = {"kernel": "6.12", "KERNEL": "6.12", "shard": "1", "SHARD": "1", "SHARDS": "2"}
    text = re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: values[m[1]], workflow)
    text = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m[1], m[0]), text)
    return [shlex.split(line)[2:] for line in re.findall(r"pytest-lbr vm [^\n]*", text)]


def test_the_user_docs_run_the_commands_this_test_runs() -> None:
    """docs/ci.md's workflows install only the package and run what the test above runs."""
    text = (REPO / "docs" / "ci.md").read_text()
    workflows = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(workflows) == 2, "docs/ci.md: one GitHub Actions workflow and one GitLab CI job"
    for wf in workflows:
        assert re.search(r"pip install ['\"]pytest-lbr\[vm\]['\"]", wf), wf
        assert "ci/" not in wf  # nothing of this repository
        commands = _doc_commands(wf)
        assert commands, wf
        for args in commands:
            at = args.index("--") if "--" in args else len(args)
            opts = vm.build_parser().parse_args(args[:at])  # every option is real
            assert opts.kernel, args
            if opts.execute is None:
                assert args[at + 1 :][: len(PYTEST_ARGS)] == PYTEST_ARGS, args
