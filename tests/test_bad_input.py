"""Bad input and untrusted files, on the host: each answered with one clear line.

The rows of docs/errors.md that need no tracing kernel. Missing pieces of the
machine (root, BTF, tracefs, libbpf, the built LBR tracer) are made real, not
mocked: the inner pytest runs as user 65534, or in a private mount namespace
where a tmpfs or /dev/null hides the piece (`unshare -m`, root only).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_lbr
from pytest_lbr.capture.hooks.tracer_object import object_arch
from pytest_lbr.tracer import Tracer

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534

USES_LBR = """
def test_traced(lbr):
    raise AssertionError("must not run: tracing is unavailable")
"""


def assert_clean(output: str) -> None:
    """No Python traceback and no pytest internal error anywhere in the output."""
    assert "Traceback" not in output, output
    assert "INTERNALERROR" not in output, output


def the_line(output: str, *parts: str) -> str:
    """The first output line holding all of `parts` (a message must not spill over lines)."""
    lines = [line for line in output.splitlines() if all(p in line for p in parts)]
    assert lines, f"{parts!r} not on one line of:\n{output}"
    return lines[0]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory user 65534 can use (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="lbr-bad-input-", dir="/tmp"))
    path.chmod(0o777)
    (path / "test_inner.py").write_text(USES_LBR)
    (path / "test_inner.py").chmod(0o644)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def inner_pytest(
    cwd: Path, *args: str, user: int | None = None, hide: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run pytest in `cwd`, as `user`, with the paths in `hide` hidden (mount namespace).

    A directory is hidden under an empty tmpfs; a file under /dev/null (a
    zero-length file: what a broken or absent install leaves).
    """
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args]
    if hide:
        mounts = " && ".join(
            f"mount -t tmpfs none {p}" if os.path.isdir(p) else f"mount --bind /dev/null {p}"
            for p in hide
        )
        cmd = ["unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh", *cmd]
    env = {**os.environ, "HOME": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        cmd, cwd=cwd, env=env, user=user, capture_output=True, text=True, timeout=300
    )


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to drop to user 65534 or to unshare a mount namespace)")


def needs_python_for_nobody() -> None:
    """Skip when user 65534 cannot run this venv's Python: a checkout inside a 0700
    directory (e.g. under /root) is not searchable by other users, and the venv
    (interpreter and site-packages) lives in it."""
    for parent in Path(sys.executable).parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            pytest.skip(
                f"{parent} is not searchable by other users (mode "
                f"{stat.S_IMODE(parent.stat().st_mode):o}): user {NOBODY} cannot run "
                f"{sys.executable}"
            )


def needs_unshare() -> None:
    needs_root()
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private mount namespace here: {probe.stderr.strip()}")


# -- the machine lacks something ------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "reason"),
    [
        ("graph", "the graph backend needs root (ftrace); run as root"),
        ("lbr", "not root and missing CAP_BPF+CAP_PERFMON"),
    ],
)
def test_not_root_skips_with_the_reason_or_errors_with_require(
    shared_dir: Path, backend: str, reason: str
) -> None:
    needs_root()
    needs_python_for_nobody()
    skip = inner_pytest(shared_dir, "--lbr", f"--lbr-backend={backend}", user=NOBODY)
    out = skip.stdout + skip.stderr
    assert skip.returncode == 125, out
    the_line(out, "SKIPPED", reason)
    assert_clean(out)
    required = inner_pytest(
        shared_dir, "--lbr", f"--lbr-backend={backend}", "--lbr-require", user=NOBODY
    )
    out = required.stdout + required.stderr
    assert required.returncode == 125, out
    assert "1 error" in out
    the_line(out, "tracing required (--lbr-require) but unavailable: ", reason)
    assert_clean(out)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "hide", "reason"),
    [
        (
            "lbr",
            ("/sys/kernel",),
            "no kernel BTF at /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)",
        ),
        (
            "graph",
            ("/sys/kernel",),
            "tracefs is not mounted; mount it: mount -t tracefs nodev /sys/kernel/tracing",
        ),
        ("lbr", ("LIBBPF",), "cannot load libbpf (libbpf.so.1): "),
    ],
    ids=["no-btf", "no-tracefs", "no-libbpf"],
)
def test_missing_piece_is_one_line(
    shared_dir: Path, backend: str, hide: tuple[str, ...], reason: str
) -> None:
    needs_unshare()
    if hide == ("LIBBPF",):
        lib = (
            shutil.which("ldconfig")
            and subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        )
        paths = [
            ln.split("=>")[-1].strip() for ln in (lib or "").splitlines() if "libbpf.so.1 " in ln
        ]
        if not paths:
            pytest.skip("libbpf.so.1 is not installed (nothing to hide)")
        hide = (os.path.realpath(paths[0]),)
    for required in (False, True):
        args = ["--lbr", f"--lbr-backend={backend}", *(["--lbr-require"] if required else [])]
        result = inner_pytest(shared_dir, *args, hide=hide)
        out = result.stdout + result.stderr
        assert result.returncode == 125, out
        if required:
            the_line(out, "tracing required (--lbr-require) but unavailable: ", reason)
        else:
            the_line(out, "SKIPPED", reason)
        assert_clean(out)


# -- a broken install ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["lbr", "graph"])
def test_a_package_without_its_tracer_object_stops_at_session_start(
    shared_dir: Path, backend: str
) -> None:
    """Regression: without its objects the install handed tests traces with no return
    values (graph) or skipped them (lbr); now the session stops at its start."""
    needs_unshare()
    objects = Path(pytest_lbr.__file__).parent / "objects"
    result = inner_pytest(shared_dir, "--lbr", f"--lbr-backend={backend}", hide=(str(objects),))
    out = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, out
    line = the_line(out, "ERROR: pytest-lbr cannot trace fully: ")
    assert line.startswith(
        f"ERROR: pytest-lbr cannot trace fully: LBR tracer object missing from this install: "
        f"{objects}/lbr_tracer.{object_arch()}.bpf.o (reinstall pytest-lbr; in a source tree run: make -C bpf)"
    ), line
    assert "test_traced" not in out  # no test ran
    assert_clean(out)
    # Without --lbr the plugin checks nothing (and the test skips as always).
    plain = inner_pytest(shared_dir, hide=(str(objects),))
    assert plain.returncode == 0 and "1 skipped" in plain.stdout, plain.stdout + plain.stderr


def test_python_m_pytest_in_a_checkout_without_objects_says_how_to_build_them(
    tmp_path: Path,
) -> None:
    """`python -m pytest` in a source tree imports the tree's pytest_lbr (the working
    directory is first on sys.path): without built objects it names the tree and the
    fix; after `make -C bpf` (what ci/setup and pip install -e . do) it traces."""
    if shutil.which("clang") is None or shutil.which("make") is None:
        pytest.skip("clang and make build the tracer object")
    checkout = tmp_path / "checkout"
    shutil.copytree(
        Path(pytest_lbr.__file__).parent,
        checkout / "pytest_lbr",
        ignore=shutil.ignore_patterns("objects", "__pycache__"),
    )
    shutil.copytree(ROOT / "bpf", checkout / "bpf", ignore=shutil.ignore_patterns("build"))
    (checkout / "setup.py").write_text("")
    (checkout / "test_inner.py").write_text(USES_LBR)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--lbr", "test_inner.py"]
    run = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert the_line(out, "ERROR: pytest-lbr cannot trace fully: ") == (
        f"ERROR: pytest-lbr cannot trace fully: pytest_lbr imported from the source tree "
        f"{checkout} has no LBR tracer object ({checkout}/pytest_lbr/objects/lbr_tracer."
        f"{object_arch()}.bpf.o): build it there (make -C {checkout}/bpf, or pip install -e {checkout}), "
        f"or run the installed pytest-lbr (pytest, or python -P -m pytest)"
    )
    assert_clean(out)
    subprocess.run(["make", "-s", "-C", str(checkout / "bpf")], check=True)
    built = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    out = built.stdout + built.stderr
    # Past the check: the test gets the tracing verdict of this machine (the host
    # cannot trace: skipped, exit 125; a tracing kernel would run it).
    assert "cannot trace fully" not in out, out
    assert built.returncode in (125, 1), out
    assert_clean(out)


# -- options -------------------------------------------------------------------------


def test_unknown_filter_on_the_command_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--lbr", "--lbr-filter=everything")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = the_line(result.stderr.str(), "--lbr-filter")
    assert "invalid choice: 'everything'" in line and "ind_jump" in line
    assert_clean(result.stdout.str() + result.stderr.str())
    with pytest.raises(ValueError, match=r"^unknown LBR filter 'everything'; expected one of any,"):
        Tracer(filter="everything")


def test_unknown_coverage_report_format(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--lbr-cov-report=xml:cov.xml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = the_line(result.stderr.str(), "--lbr-cov-report")
    assert line.endswith(
        "--lbr-cov-report / lbr_cov_report: unknown coverage report format 'xml'; "
        "expected one of lcov, cobertura (FORMAT:PATH)"
    )


def test_a_coverage_report_that_cannot_be_written_is_said_not_raised(
    pytester: pytest.Pytester,
) -> None:
    # A file where the report's directory should be (as a read-only tree would refuse it).
    (pytester.path / "taken").write_text("")
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest("--lbr-cov-report=lcov:taken/cov.info")
    assert result.ret == pytest.ExitCode.OK
    line = the_line(result.stdout.str(), "coverage: cannot write")
    assert "taken/cov.info" in line and "the runner writes it" in line
    assert "lbr coverage: lcov" not in result.stdout.str()


@pytest.fixture(scope="module")
def small_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ELF with a GNU build-id that is not the running kernel's."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build a small ELF")
    folder = tmp_path_factory.mktemp("elf")
    (folder / "a.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(
        [cc, "-g", "-Wl,--build-id", "-o", str(folder / "a.out"), str(folder / "a.c")], check=True
    )
    return folder / "a.out"


@pytest.mark.parametrize("case", ["wrong-build-id", "truncated", "not-elf", "missing"])
def test_bad_vmlinux_is_a_usage_error(
    pytester: pytest.Pytester, small_elf: Path, case: str
) -> None:
    if not os.access("/sys/kernel/notes", os.R_OK):
        pytest.skip("/sys/kernel/notes is unreadable: the running kernel's build-id is unknown")
    path = pytester.path / case
    data = small_elf.read_bytes()
    if case == "wrong-build-id":
        path.write_bytes(data)
        want = "does not match the running kernel's build-id"
    elif case == "truncated":
        path.write_bytes(data[: len(data) // 2])
        # Half an ELF: pyelftools finds its section headers past the end of the file.
        want = "past EOF"
    elif case == "not-elf":
        path.write_text("this is not an ELF file\n")
        want = "not a usable ELF file"
    else:
        want = "cannot open: No such file or directory"
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest("--lbr", f"--lbr-vmlinux={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = the_line(result.stderr.str(), "--lbr-vmlinux / lbr_vmlinux: ")
    assert str(path) in line and want in line, line
    assert_clean(result.stdout.str() + result.stderr.str())


# -- untrusted files: golden traces and reports -----------------------------------------

TRACE_HELPER = """
from pytest_lbr.model import Branch, Hit, Location, Trace

def make_trace():
    loc = lambda s: Location(addr=0xffffffff81000000, symbol=s, offset=0)
    hit = Hit(target="kfunc:vfs_write", cpu=0, pid=1, tid=1,
              branches=[Branch(loc("vfs_write"), loc("write_null"), "call")])
    return Trace(targets=["kfunc:vfs_write"], backend="graph", hits=[hit],
                 kernel_release="6.12.117+deb12-amd64")
"""

CRAFTED = textwrap.dedent("""\
    # pytest-lbr golden trace
    # format: 1
    # kernel: 6.12.117+deb12-amd64
    # arch: x86_64
    # backend: graph
    # level: function
    # !!python/object/apply:os.system: ["touch {canary}"]
    hit __import__('os').system('touch {canary}')
    vfs_write -> !!python/object/apply:os.system ["touch {canary}"]
    {{{{ exec(open('{canary}','w').write('x')) }}}} -> write_null
    """)


def golden_suite(pytester: pytest.Pytester) -> Path:
    """A one-test suite checking a golden trace; returns where its golden file goes."""
    pytester.makepyfile(tracehelper=TRACE_HELPER)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_suite="from tracehelper import make_trace\n\n"
        "def test_write(lbr_golden):\n    lbr_golden(make_trace())\n"
    )
    golden = pytester.path / "__lbr_golden__" / "test_suite" / "test_write.lbr"
    golden.parent.mkdir(parents=True)
    return golden


def test_crafted_golden_file_is_data_only(pytester: pytest.Pytester) -> None:
    canary = pytester.path / "canary"
    golden = golden_suite(pytester)
    golden.write_text(CRAFTED.format(canary=canary))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # Compared as text: the crafted lines show up verbatim in the diff, nothing ran.
    assert not canary.exists()
    assert "golden trace mismatch: __lbr_golden__/test_suite/test_write.lbr" in out
    assert f'-vfs_write -> !!python/object/apply:os.system ["touch {canary}"]' in out
    assert_clean(out)


@pytest.mark.parametrize(
    "header",
    ["# level: ../../../etc/passwd", "# format: __import__('os')", "# backend"],
)
def test_crafted_golden_header_is_refused_in_one_line(
    pytester: pytest.Pytester, header: str
) -> None:
    golden = golden_suite(pytester)
    lines = CRAFTED.format(canary="x").splitlines()[:6]
    key = header.split(":")[0]
    lines = [ln for ln in lines if not ln.startswith(key + ":")] + [header]
    golden.write_text("\n".join(lines) + "\n")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    line = the_line(out, "unusable golden trace: __lbr_golden__/test_suite/test_write.lbr")
    assert line.endswith(
        (
            "unknown level '../../../etc/passwd'",
            "re-create it with --lbr-golden-update",
            "malformed header line '# backend'",
        )
    ), line
    assert_clean(out)


ESCAPING = textwrap.dedent("""
    import pytest
    from tracehelper import make_trace

    @pytest.mark.parametrize("where", ["../../../outside", "a/b", "..", "/etc/passwd"])
    def test_escape(lbr_golden, where):
        lbr_golden(make_trace(), name=where)

    def test_link(lbr_golden):
        lbr_golden(make_trace())
    """)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_golden_and_report_writes_stay_in_their_directories(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(tracehelper=TRACE_HELPER)
    pytester.syspathinsert()
    pytester.makepyfile(test_suite=ESCAPING)
    # A golden file that is a symlink to a file elsewhere: the update replaces the
    # link, the file it pointed to is untouched.
    outside = tmp_path / "outside.lbr"
    outside.write_text("not yours\n")
    folder = pytester.path / "__lbr_golden__" / "test_suite"
    folder.mkdir(parents=True)
    (folder / "test_link.lbr").symlink_to(outside)
    before = _files(pytester.path)
    old = os.umask(0)  # the written files must not inherit a permissive umask
    try:
        result = pytester.runpytest(
            "-p", "no:cacheprovider", "--lbr-golden-update", f"--lbr-report={pytester.path / 'rep'}"
        )
    finally:
        os.umask(old)
    result.assert_outcomes(passed=5)
    assert_clean(result.stdout.str())
    assert outside.read_text() == "not yours\n"
    new = _files(pytester.path) - before
    assert new, "nothing written"
    outside_dirs = [p for p in new if not p.startswith(("__lbr_golden__/test_suite/", "rep/"))]
    assert not outside_dirs, outside_dirs
    assert not (pytester.path.parent / "outside.lbr").exists()
    written = [p for p in new if p.startswith("__lbr_golden__/")]
    assert len(written) == 4  # + test_link.lbr, which existed (as a link) before
    assert not (folder / "test_link.lbr").is_symlink()
    for p in [*written, "__lbr_golden__/test_suite/test_link.lbr"]:
        if p.startswith("__lbr_golden__/"):
            path = pytester.path / p
            assert not path.is_symlink()
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, p
    # ... and they check back as matches.
    pytester.runpytest().assert_outcomes(passed=5)
