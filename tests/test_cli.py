"""The `pytest-lbr` command line on the host: usage errors, `diff` of two golden
files, `doctor` with the host's real answers, `fetch-vmlinux` on packages built
here. The guests run tests/kernel/test_cli_kernel.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.cli import doctor_checks, main
from pytest_lbr.cli.fetch_vmlinux import extract_vmlinux
from pytest_lbr.golden import serialize
from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS, find_tracefs
from pytest_lbr.live import comm_matches, hit_json, is_error
from pytest_lbr.model import Branch, Hit, InlineFrame, Location, Trace
from pytest_lbr.symbols.vmlinux import VmlinuxError
from tests.commands import PYTEST_LBR

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed console script's module, as a user runs it."""
    return subprocess.run([PYTEST_LBR, *argv], capture_output=True, text=True, timeout=120)


def golden_file(path: Path, lines: list[str], kernel: str) -> Path:
    trace = Trace(backend="graph", kernel_release=kernel, arch="x86_64")
    path.write_text(serialize(trace, lines, "function"))
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required"),
        (["trace"], "the following arguments are required: TARGET"),
        (["trace", "foo:bar"], "bad target 'foo:bar': unknown kind 'foo'"),
        (["trace", "kfunc:vfs_write", "--count", "0"], "argument --count: must be > 0"),
        (["trace", "kfunc:x", "--count", "1", "--duration", "2"], "not allowed with argument"),
        (["trace", "kfunc:x", "--backend", "fast"], "argument --backend: invalid choice"),
        (["trace", "kfunc:x", "--pid", "1", "--all"], "argument --all: not allowed with"),
        (["trace", "kfunc:x", "--pid", "1", "--cgroup", "x"], "not allowed with argument --pid"),
        (["trace", "kfunc:x", "--pid", "0"], "argument --pid: must be > 0"),
        (["trace", "kfunc:x", "--pid", "4194305"], "pid=4194305: no such process"),
        (["trace", "kfunc:x", "--cgroup", "/nonexistent"], "'/nonexistent': not a cgroup v2"),
        (["trace", "kfunc:x", "--window", "1"], "unrecognized arguments: --window"),
        (
            ["trace", "tp:syscalls/sys_enter_getpid", "kfunc:vfs_*", "--errors-only"],
            "--errors-only keeps hits that return an error, and tp:syscalls/sys_enter_getpid, "
            "kfunc:vfs_* return no value here",
        ),
        (["diff", "/nonexistent/a.lbr", "/nonexistent/b.lbr"], "cannot read /nonexistent/a.lbr"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], message: str) -> None:
    res = run(*argv)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pytest-lbr: error: ")
    assert message in lines[0]


def test_diff_shows_the_unified_diff_and_first_divergence(tmp_path: Path) -> None:
    a = golden_file(
        tmp_path / "test_cpu_stamp.lbr",
        [
            "hit prog:name:cpu_stamp",
            "cpu_stamp -> bpf_get_smp_processor_id",
            "cpu_stamp -> array_map_lookup_elem",
        ],
        "6.1.0-56-amd64",
    )
    b = golden_file(
        tmp_path / "test_cpu_stamp@6.12.lbr",
        ["hit prog:name:cpu_stamp", "cpu_stamp -> array_map_lookup_elem"],
        "6.12.117+deb12-amd64",
    )
    res = run("diff", str(a), str(b))
    assert res.returncode == 1, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == "# kernel: 6.1.0-56-amd64 -> 6.12.117+deb12-amd64"
    assert f"--- {a}" in out and f"+++ {b}" in out
    assert "-cpu_stamp -> bpf_get_smp_processor_id" in out
    assert out[-1] == (
        "first divergence at edge 2: expected 'cpu_stamp -> bpf_get_smp_processor_id', "
        "got 'cpu_stamp -> array_map_lookup_elem'"
    )


def test_diff_of_identical_files_exits_0(tmp_path: Path) -> None:
    a = golden_file(tmp_path / "a.lbr", ["hit kfunc:vfs_write", "vfs_write -> write_null"], "6.1.0")
    assert run("diff", str(a), str(a)).stdout == "identical: 2 edge line(s)\n"
    assert run("diff", str(a), str(a)).returncode == 0


def test_diff_refuses_a_file_that_is_not_golden(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    res = run("diff", str(bad), str(bad))
    assert res.returncode == 2
    assert "not a pytest-lbr golden trace" in res.stderr


def test_main_returns_exit_codes_without_raising(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "kfunc:vfs_write", "--duration", "-1"]) == 2
    assert "argument --duration: must be > 0" in capsys.readouterr().err


def _hit(retval: int | None = -9, comm: str = "writer") -> Hit:
    site = Location(0xFFFFFFFF92C5823F, "ksys_write", 0x6F, file="fs/read_write.c", line=643)
    entry = Location(
        0xFFFFFFFF92C57C10,
        "vfs_write",
        0,
        inlined=(InlineFrame("file_start_write", "include/linux/fs.h", 2911),),
    )
    branches = [Branch(site, entry, "call"), Branch(entry, site, "ret")]
    return Hit(
        "kfunc:vfs_write",
        cpu=1,
        pid=300,
        tid=301,
        retval=retval,
        branches=branches,
        raw_branches=list(branches),
        timestamp_ns=78_097_756_000,
        comm=comm,
    )


def test_trace_json_is_one_object_per_hit_with_every_field() -> None:
    line = json.dumps(hit_json(_hit()))
    assert "\n" not in line
    obj = json.loads(line)
    assert obj == {
        "target": "kfunc:vfs_write",
        "cpu": 1,
        "pid": 300,
        "tid": 301,
        "comm": "writer",
        "in_interrupt": False,
        "retval": -9,
        "timestamp_ns": 78_097_756_000,
        "branches": [
            {
                "src": {
                    "addr": "0xffffffff92c5823f",
                    "symbol": "ksys_write",
                    "offset": 0x6F,
                    "file": "fs/read_write.c",
                    "line": 643,
                    "inlined": [],
                },
                "dst": {
                    "addr": "0xffffffff92c57c10",
                    "symbol": "vfs_write",
                    "offset": 0,
                    "file": None,
                    "line": None,
                    "inlined": [
                        {"function": "file_start_write", "file": "include/linux/fs.h", "line": 2911}
                    ],
                },
                "kind": "call",
            },
            obj["branches"][1],
        ],
    }
    assert obj["branches"][1]["kind"] == "ret"
    assert obj["branches"][1]["src"]["symbol"] == "vfs_write"


@pytest.mark.parametrize(
    "retval, error",
    [
        (-1, True),  # -EPERM
        (-9, True),  # -EBADF
        (-4095, True),  # MAX_ERRNO
        (-4096, False),
        (0, False),
        (2, False),
        (None, False),  # a tracepoint: no value
        ((1 << 32) - 9, True),  # -EBADF from a function returning int, zero-extended
        ((1 << 32) - 4096, False),
        (1 << 32, False),
        ((1 << 64) - 9 - (1 << 64), True),  # ERR_PTR(-EBADF)
    ],
)
def test_errors_only_keeps_negative_errnos(retval: int | None, error: bool) -> None:
    assert is_error(retval) is error


def test_comm_filter_is_a_glob_on_the_whole_name() -> None:
    assert comm_matches(_hit(comm="writer"), "writer")
    assert comm_matches(_hit(comm="writer"), "wri*")
    assert comm_matches(_hit(comm="kworker/0:1"), "kworker/*")
    assert not comm_matches(_hit(comm="writer"), "write")
    assert not comm_matches(_hit(comm=""), "writer")


def test_trace_without_tracing_says_why_in_one_line() -> None:
    """On the development host (no ftrace for this process) the live trace stops at once."""
    res = run("trace", "kfunc:vfs_write", "--count", "1")
    if res.returncode == 0:
        pytest.skip("this machine can trace: the guests test the live trace")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith("pytest-lbr: cannot trace: ") and res.stderr.count("\n") == 1


def test_doctor_reports_the_hosts_real_reasons() -> None:
    checks = {c.name: c for c in doctor_checks()}
    assert list(checks) == [
        "root",
        "BTF",
        "fentry",
        "kprobe.multi",
        "PMU",
        "LBR",
        "tracefs",
        "debug vmlinux",
    ]
    assert checks["root"].ok == (os.geteuid() == 0)
    assert checks["BTF"].ok == os.path.exists("/sys/kernel/btf/vmlinux")
    assert checks["LBR"].ok == Path("/sys/bus/event_source/devices/cpu/caps/branches").exists()
    for check in checks.values():
        assert check.detail, check.name
        if not check.ok:  # every "no" says why and what to do
            assert check.fix, check.name
    if os.environ.get("PYTEST_LBR_GUEST") != "1":
        # MACHINE.md: the host kernel refuses fentry and has no PMU; say exactly that.
        if os.geteuid() == 0 and os.path.exists("/sys/kernel/btf/vmlinux"):
            assert not checks["fentry"].ok and "EPERM" in checks["fentry"].detail
        if not Path("/sys/bus/event_source/devices/cpu").exists() or not checks["PMU"].ok:
            assert "perf_event_open(cycles) failed" in checks["PMU"].detail


def test_each_backends_doctor_line_is_its_own_probes() -> None:
    """Issue 52: the doctor names no backend; each registered backend's probe says what
    it checked, what it found and the fix, and the doctor prints that."""
    from pytest_lbr.capture import REGISTRY, probe

    checks = {c.name: c for c in doctor_checks()}
    for name in REGISTRY:
        cap = probe(name)
        line = checks[cap.check]
        assert line.ok == cap.available and line.fix == cap.fix
        assert cap.reason in line.detail and (cap.available or cap.fix), name
    graph = probe("graph")
    if os.geteuid() == 0 and find_tracefs() is None:  # this host, as MACHINE.md says
        assert "doctor --mount" in graph.fix


def test_doctor_output_has_the_line_shapes_docs_cli_md_shows() -> None:
    res = run("doctor")
    assert res.returncode in (0, 1), res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"pytest-lbr doctor: kernel \S+ \S+", lines[0])
    shape = re.compile(r"\[(ok|no)\] [A-Za-z. ]+: .+|     fix: .+|=> .+")
    assert all(shape.fullmatch(line) for line in lines[1:]), res.stdout
    assert lines[-1].startswith("=> ")
    # The documented sample has the same shapes.
    sample = DOCS.read_text().split("<!-- doctor-sample -->")[1].split("```")[1].splitlines()[1:]
    assert re.fullmatch(r"pytest-lbr doctor: kernel \S+ \S+", sample[0])
    assert all(shape.fullmatch(line) for line in sample[1:] if line), sample


def test_doctor_mount_says_tracefs_is_mounted_and_changes_nothing_else() -> None:
    if find_tracefs() != Path(TRACEFS_MOUNTS[0]):
        pytest.skip(f"tracefs is not mounted at {TRACEFS_MOUNTS[0]}: this test does not mount it")
    res = run("doctor", "--mount")
    assert res.returncode in (0, 1), res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == f"[ok] mount tracefs: already mounted at {TRACEFS_MOUNTS[0]}"
    assert [line.split(":")[0] for line in lines[2:] if line.startswith("[")] == [
        f"[{'ok' if c.ok else 'no'}] {c.name}" for c in doctor_checks()
    ]


def _package(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A real .deb holding `files` (paths under the root), built with dpkg-deb."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (Debian package dpkg)")
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: linux-image-9.9.9-test-dbg\nVersion: 1\nArchitecture: all\n"
        "Maintainer: test <test@example.org>\nDescription: test\n"
    )
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    deb = tmp_path / "linux-image-9.9.9-test-dbg_1_all.deb"
    subprocess.run(
        ["dpkg-deb", "-Znone", "--root-owner-group", "--build", str(root), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


def test_fetch_vmlinux_takes_only_the_vmlinux_out_of_the_package(tmp_path: Path) -> None:
    image = os.urandom(300_000)
    deb = _package(
        tmp_path,
        {
            "usr/lib/debug/boot/vmlinux-9.9.9-test": image,
            "usr/lib/debug/lib/modules/9.9.9-test/kernel/x.ko": b"module",
        },
    )
    target = tmp_path / "cache" / "vmlinux-9.9.9-test"
    extract_vmlinux(deb, "9.9.9-test", target)
    assert target.read_bytes() == image
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no partial file left
    with pytest.raises(VmlinuxError, match=r"has no \./usr/lib/debug/boot/vmlinux-1\.0-other$"):
        extract_vmlinux(deb, "1.0-other", tmp_path / "other")
    (tmp_path / "broken.deb").write_bytes(b"not a package")
    with pytest.raises(VmlinuxError, match=r"^cannot read .*broken\.deb: "):
        extract_vmlinux(tmp_path / "broken.deb", "9.9.9-test", tmp_path / "other")


def test_fetch_vmlinux_prints_the_cached_path_without_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no apt-get to run
    cached = tmp_path / "pytest-lbr" / "dbg" / "usr" / "lib" / "debug" / "boot" / "vmlinux-9.9"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"\x7fELF")
    assert main(["fetch-vmlinux", "9.9"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"{cached}\n", "")


def test_fetch_vmlinux_reports_progress_and_failure_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # apt-get cannot be found
    assert main(["fetch-vmlinux", "9.9"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    progress, failure = err.splitlines()
    assert progress == (
        f"pytest-lbr: downloading linux-image-9.9-dbg (~900 MB) into {tmp_path}/pytest-lbr/dbg"
    )
    assert failure.startswith("pytest-lbr: cannot fetch the debug vmlinux of 9.9: ")
    assert "apt-get" in failure


@pytest.mark.parametrize(
    "doc, marker", [("cli.md", "<!-- diff-sample -->"), ("bisect.md", "<!-- bisect-diff -->")]
)
def test_documented_golden_diff_is_what_the_command_prints(doc: str, marker: str) -> None:
    """The docs quote `pytest-lbr diff` on the committed cpu_stamp golden files verbatim."""
    block = (DOCS.parent / doc).read_text().split(marker)[1].split("```")[1].strip("\n")
    command, *expected = block.splitlines()
    argv = command.removeprefix("$ pytest-lbr ").split()
    repo = DOCS.parent.parent
    res = subprocess.run([PYTEST_LBR, *argv], capture_output=True, text=True, cwd=repo)
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines() == expected
    # The founding example: the 6.1 trace calls the helper, the 6.12 one does not.
    assert "-cpu_stamp -> bpf_get_smp_processor_id" in expected
