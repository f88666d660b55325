"""The pytest plugin seen from a user's pytest run (pytester), on the host.

Golden logic needs no kernel: the inner tests build `Trace` objects and hand them
to the `lbr_golden` fixture, the same check `lbr.check_golden` delegates to.
Tracing itself cannot run on the host, which is what the skip / --lbr-require /
exit-status-125 tests rely on (they skip if this machine can trace after all).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_lbr import golden
from pytest_lbr.exit_codes import EXIT_CANNOT_TEST

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]

# Builds a graph-backend-like trace: a call/ret walk through `calls` under `top`.
TRACE_HELPER = """
from pytest_lbr.model import Branch, Hit, Location, Trace

def loc(sym, off=0):
    return Location(addr=0xffffffff81000000 + off, symbol=sym, offset=off, file="fs/x.c", line=off)

def make_trace(top="vfs_write", calls=("rw_verify_area", "write_null"), target="kfunc:vfs_write",
               backend="graph", noise=False):
    branches = []
    for i, callee in enumerate(calls):
        branches.append(Branch(loc(top, 0x10 + i), loc(callee), "call"))
        if noise:  # a timer interrupt in the middle of the callee
            branches.append(Branch(loc(callee, 4), loc("__sysvec_apic_timer_interrupt"), "call"))
            branches.append(Branch(loc("__sysvec_apic_timer_interrupt", 8), loc("hrtimer_interrupt"), "call"))
            branches.append(Branch(loc("hrtimer_interrupt", 9), loc("__sysvec_apic_timer_interrupt", 9), "ret"))
            branches.append(Branch(loc("__sysvec_apic_timer_interrupt", 10), loc(callee, 5), "ret"))
        branches.append(Branch(loc(callee, 6), loc(top, 0x11 + i), "ret"))
    hit = Hit(target=target, cpu=0, pid=1, tid=1, branches=branches)
    return Trace(targets=[target], backend=backend, hits=[hit], kernel_release="6.12.117+deb12-amd64")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(tracehelper=TRACE_HELPER)
    pytester.syspathinsert()
    return pytester


def golden_test(calls: tuple[str, ...] = ("rw_verify_area", "write_null"), **kw: object) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in kw.items())
    return textwrap.dedent(f"""
        from tracehelper import make_trace

        def test_write(lbr_golden):
            lbr_golden(make_trace(calls={calls!r}{extra}))
    """)


def many_golden_tests(count: int) -> str:
    """`count` parametrized tests with a golden trace each (for xdist)."""
    return textwrap.dedent(f"""
        import pytest
        from tracehelper import make_trace

        @pytest.mark.parametrize("n", range({count}))
        def test_many(lbr_golden, n):
            lbr_golden(make_trace(calls=tuple(f"f{{i}}" for i in range(n + 1))))
    """)


def host_can_trace() -> bool:
    from pytest_lbr.tracer import Tracer

    try:
        return Tracer().available
    except Exception:
        return False


# -- options -------------------------------------------------------------------------


def test_help_lists_the_option_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*LBR branch tracing (pytest-lbr)*",
            "*--lbr *enable branch tracing*",
            "*--lbr-backend={auto,lbr,graph}*",
            "*--lbr-require*",
            "*--lbr-filter=*",
            "*--lbr-vmlinux=PATH*",
            "*--lbr-report=DIR*",
            "*--lbr-golden-update*",
            "*--lbr-kernel-splats={fail,off}*",
            "*--lbr-results=FILE*",
            "*--lbr-cov *",
            "*lbr_backend (string)*",
        ]
    )


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--lbr", "--lbr-backend=pt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--lbr-backend*invalid choice*'pt'*auto*lbr*graph*"])


@pytest.mark.parametrize(
    "ini, line",
    [
        (
            "lbr_filter = everything",
            "--lbr-filter / lbr_filter: unknown value 'everything'; choose from any, any_call, "
            "any_return, call, ind_call, cond, call_stack, ind_jump",
        ),
        (
            "lbr_backend = pt",
            "--lbr-backend / lbr_backend: unknown value 'pt'; choose from auto, lbr, graph",
        ),
        (
            "lbr_pmu = fpga",
            "--lbr-pmu / lbr_pmu: unknown value 'fpga'; choose from hardware, software",
        ),
        (
            "lbr_scope = everyone",
            "lbr_scope: unknown value 'everyone'; choose from process, children, system",
        ),
    ],
    ids=["filter", "backend", "pmu", "scope"],
)
def test_an_unknown_ini_value_is_a_usage_error_listing_the_choices(
    pytester: pytest.Pytester, ini: str, line: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest("--lbr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {line}"])


@pytest.mark.parametrize("results", [False, True])
def test_the_backend_is_probed_at_the_end_only_for_the_results_file(
    pytester: pytest.Pytester, results: bool
) -> None:
    # A probe cleans up what dead sessions left (a crashed xdist worker's tracefs
    # instance): a session whose tests never traced must not probe on its own.
    pytester.makeconftest(
        """
        import pytest
        from pytest_lbr.plugin.session import SESSION_KEY

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(config):
            print("probed:", config.stash[SESSION_KEY]._probe is not None)
        """
    )
    pytester.makepyfile("def test_plain(): pass")
    args = ["--lbr", "-s", *(["--lbr-results=r.jsonl"] if results else [])]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"probed: {results}"])
    if results:
        session = json.loads((pytester.path / "r.jsonl").read_text().splitlines()[-1])
        assert session["type"] == "session" and session["backend"], session


@pytest.mark.parametrize(
    "ini",
    ["lbr_cov = true", "lbr_cov_report = lcov:cov.info"],
    ids=["lbr_cov", "lbr_cov_report"],
)
def test_ini_keys_turn_coverage_on(pytester: pytest.Pytester, ini: str) -> None:
    # Each ini key is read as its option is (a report asked for is coverage asked for).
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*lbr coverage: BPF programs*", "no BPF program was traced"])
    assert (pytester.path / "cov.info").exists() == ini.startswith("lbr_cov_report")


def test_ini_keys_set_the_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nlbr = true\nlbr_backend = graph\nlbr_golden_update = true\n"
        "lbr_pmu = software\nlbr_filter = call\nlbr_scope = system\n"
    )
    pytester.makepyfile(
        """
        from pytest_lbr.plugin.golden import golden_book
        from pytest_lbr.plugin.session import SESSION_KEY

        def test_opts(request):
            s = request.config.stash[SESSION_KEY]
            update = golden_book(request.config).update
            assert (s.enabled, s.backend, update, s.require) == (True, "graph", True, False)
            assert (s.backend, s.pmu, s.filter, s.scope) == ("graph", "software", "call", "system")
            assert type(s.backend).__name__ == "BackendName" and type(s.scope).__name__ == "ScopeKind"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


# -- skipping and start-up cost ---------------------------------------------------------


def test_without_lbr_tracing_tests_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_fixture(lbr):
            raise AssertionError("must not run")

        @pytest.mark.lbr("kfunc:vfs_write", golden=True)
        def test_marker():
            raise AssertionError("must not run")

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*tracing disabled: run with --lbr*"] * 2)
    assert result.ret == 0


def test_without_lbr_nothing_heavy_is_imported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_modules():
            loaded = sorted(m for m in sys.modules if m.startswith("pytest_lbr"))
            heavy = [m for m in loaded if m.startswith(("pytest_lbr.capture.", "pytest_lbr.symbols",
                     "pytest_lbr.bpf.libbpf", "pytest_lbr.bpf", "pytest_lbr.golden", "pytest_lbr.report.render"))]
            assert heavy == [], loaded
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_importing_the_plugin_loads_no_heavy_module() -> None:
    """pytest imports the plugin in every session of a machine that has it installed,
    with or without --lbr: it loads its own light modules only, never the
    disassembler, the ELF/DWARF reader, libbpf or the backends (how long that takes
    is measured in bench/, not here)."""
    code = (
        "import sys, pytest; before = set(sys.modules); import pytest_lbr.plugin; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    loaded = subprocess.check_output([sys.executable, "-c", code], text=True).split()
    assert "pytest_lbr.plugin" in loaded
    heavy = (
        "capstone",
        "elftools",
        "hypothesis",
        "pytest_lbr.bpf.libbpf",
        "pytest_lbr.capture",
        "pytest_lbr.symbols",
        "pytest_lbr.tracer",
        "pytest_lbr.bytecode",
    )
    assert not [m for m in loaded if m.startswith(heavy)], loaded


@pytest.mark.skipif(
    host_can_trace(), reason="this machine can trace: no unavailable backend to test"
)
def test_unavailable_backend_skips_and_exits_125(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fixture(lbr):
            raise AssertionError("must not run")
        """
    )
    result = pytester.runpytest("--lbr", "-rs")
    result.assert_outcomes(skipped=1)
    assert "tracing disabled" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"*tracing could not run*exit status {EXIT_CANNOT_TEST}*", "SKIPPED*"]
    )
    assert result.ret == EXIT_CANNOT_TEST


@pytest.mark.skipif(
    host_can_trace(), reason="this machine can trace: no unavailable backend to test"
)
def test_require_turns_unavailable_into_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.lbr("kfunc:vfs_write")
        def test_marker():
            raise AssertionError("must not run")
        """
    )
    result = pytester.runpytest("--lbr", "--lbr-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*tracing required (--lbr-require) but unavailable: *"])
    assert result.ret == EXIT_CANNOT_TEST


# -- golden traces ---------------------------------------------------------------------


def golden_file(pytester: pytest.Pytester, name: str = "test_write") -> Path:
    return pytester.path / "__lbr_golden__" / "test_suite" / f"{name}.lbr"


def test_golden_update_writes_then_check_passes(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=golden_test())
    missing = suite.runpytest()
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(
        ["*no golden trace __lbr_golden__/test_suite/test_write.lbr*--lbr-golden-update*"]
    )

    written = suite.runpytest("--lbr-golden-update")
    written.assert_outcomes(passed=1)
    written.stdout.fnmatch_lines(
        ["*lbr: 1 golden trace(s) written*", "*__lbr_golden__/test_suite/test_write.lbr"]
    )
    path = golden_file(suite)
    assert path.read_text().splitlines() == [
        "# pytest-lbr golden trace",
        f"# format: {golden.FORMAT_VERSION}",
        "# kernel: 6.12.117+deb12-amd64",
        "# arch: x86_64",
        "# backend: graph",
        "# level: function",
        "hit kfunc:vfs_write",
        "vfs_write -> rw_verify_area",
        "vfs_write -> write_null",
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755

    again = suite.runpytest("--lbr-golden-update")
    again.assert_outcomes(passed=1)
    assert "golden trace(s) written" not in again.stdout.str()  # unchanged: not rewritten

    check = suite.runpytest()
    check.assert_outcomes(passed=1)
    assert check.ret == 0


def test_golden_mismatch_shows_diff_and_first_divergence(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=golden_test())
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=1)
    suite.makepyfile(test_suite=golden_test(calls=("rw_verify_area", "write_zero")))
    result = suite.runpytest()
    result.assert_outcomes(failed=1)
    assert result.ret == 1  # `git bisect run`: bad
    result.stdout.fnmatch_lines(
        [
            "*golden trace mismatch: __lbr_golden__/test_suite/test_write.lbr",
            "*first divergence at edge 3: expected 'vfs_write -> write_null', got 'vfs_write -> write_zero'",
            "*--- golden test_write.lbr",
            "*+++ this run",
            "* vfs_write -> rw_verify_area",
            "*-vfs_write -> write_null",
            "*+vfs_write -> write_zero",
            "*--lbr-golden-update*",
        ]
    )
    suite.runpytest("--lbr-golden-update").stdout.fnmatch_lines(["*1 golden trace(s) written*"])
    suite.runpytest().assert_outcomes(passed=1)


def test_interrupt_noise_does_not_change_the_golden(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=golden_test())
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=1)
    suite.makepyfile(test_suite=golden_test(noise=True))
    suite.runpytest().assert_outcomes(passed=1)
    # ... unless the test asks to keep the interrupt path.
    suite.makepyfile(
        test_suite=textwrap.dedent("""
        import pytest
        from tracehelper import make_trace

        @pytest.mark.lbr(keep=["*sysvec*", "hrtimer_*"])
        def test_write(lbr_golden):
            lbr_golden(make_trace(noise=True))
        """)
    )
    result = suite.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*+rw_verify_area -> __sysvec_apic_timer_interrupt"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "test_write.lbr: empty golden file*--lbr-golden-update*"),
        ("hello\n", "*test_write.lbr:1: not a pytest-lbr golden trace*"),
        (
            "# pytest-lbr golden trace\n# format: 99\n# kernel: x\n# arch: x86_64\n# backend: graph\n# level: function\n",
            "test_write.lbr: golden format version '99', this pytest-lbr reads 1*",
        ),
        (
            "# pytest-lbr golden trace\n# format: 1\n# kernel: x\n# arch: x86_64\n# backend: lbr\n# level: function\n",
            "test_write.lbr: recorded with the lbr backend, this trace is from graph*",
        ),
        (
            "# pytest-lbr golden trace\n# format: 1\n# kernel: x\n# arch: x86_64\n# backend: graph\n"
            "# level: function\nvfs_write write_null\n",
            "*test_write.lbr:7: not an edge line*",
        ),
    ],
    ids=["empty", "foreign", "version", "backend", "garbage"],
)
def test_unusable_golden_file_is_a_clear_error(
    suite: pytest.Pytester, content: str, message: str
) -> None:
    suite.makepyfile(test_suite=golden_test())
    path = golden_file(suite)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    result = suite.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["unusable golden trace: __lbr_golden__/test_suite/" + message.lstrip("*")]
    )
    # --lbr-golden-update repairs it.
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=1)
    suite.runpytest().assert_outcomes(passed=1)


def test_series_variant_wins(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=golden_test(calls=("write_null",)))
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=1)
    default = golden_file(suite)
    variant = golden_file(suite, "test_write@6.12")
    other = golden_file(suite, "test_write@6.1")
    # The 6.1 variant is ignored on 6.12; a 6.12 variant with other content is used.
    other.write_text(default.read_text().replace("write_null", "write_zero"))
    suite.runpytest().assert_outcomes(passed=1)
    variant.write_text(default.read_text().replace("write_null", "write_zero"))
    result = suite.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*golden trace mismatch: __lbr_golden__/test_suite/test_write@6.12.lbr"]
    )
    # Updating refreshes the variant, not the default.
    before = default.read_text()
    suite.runpytest("--lbr-golden-update").stdout.fnmatch_lines(["*test_write@6.12.lbr"])
    assert default.read_text() == before
    assert "vfs_write -> write_null" in variant.read_text()


def test_levels_and_names(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_suite="""
        from tracehelper import make_trace

        class TestLevels:
            def test_levels(self, lbr_golden):
                t = make_trace()
                lbr_golden(t, name="sym", level="symbol")
                lbr_golden(t, name="line", level="line")

        def test_twice(lbr_golden):
            lbr_golden(make_trace())
            lbr_golden(make_trace())
        """
    )
    result = suite.runpytest("--lbr-golden-update")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*check_golden called twice for 'test_twice': pass name=*"])
    sym = golden_file(suite, "TestLevels.test_levels.sym").read_text()
    assert "call vfs_write+0x10 -> rw_verify_area+0x0\n" in sym
    assert "ret rw_verify_area+0x6 -> vfs_write+0x11\n" in sym
    line = golden_file(suite, "TestLevels.test_levels.line").read_text()
    assert "call vfs_write (fs/x.c:16) -> rw_verify_area (fs/x.c:0)\n" in line
    assert "0xffffffff" not in sym + line  # no addresses


UNUSED_SUITE = """
import pytest
from tracehelper import make_trace

def test_write(lbr_golden):
    lbr_golden(make_trace())

def test_plain():
    if {skip}:
        pytest.skip("not here")
"""


def test_unused_golden_files_are_listed_then_pruned(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=UNUSED_SUITE.format(skip=False))
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=2)
    used = golden_file(suite)
    variant = golden_file(suite, "test_write@6.1")  # for another kernel: not unused
    orphan = golden_file(suite, "test_gone")
    for path in (variant, orphan):
        path.write_text(used.read_text())
    listed = suite.runpytest("--lbr")
    listed.assert_outcomes(passed=2)
    assert listed.ret == 0
    listed.stdout.fnmatch_lines(
        [
            "lbr: 1 unused golden trace(s): __lbr_golden__/test_suite/test_gone.lbr "
            "(--lbr-golden-prune deletes them)"
        ]
    )
    # Not when a test of the module was left out, or did not pass: it may need them.
    for args in (["-k", "test_write"], ["test_suite.py::test_write"]):
        assert "unused golden" not in suite.runpytest("--lbr-golden-prune", *args).stdout.str()
    suite.makepyfile(test_suite=UNUSED_SUITE.format(skip=True))
    skipped = suite.runpytest("--lbr-golden-prune")
    skipped.assert_outcomes(passed=1, skipped=1)
    assert "unused golden" not in skipped.stdout.str()
    assert orphan.exists()

    suite.makepyfile(test_suite=UNUSED_SUITE.format(skip=False))
    pruned = suite.runpytest("--lbr-golden-prune")
    pruned.stdout.fnmatch_lines(
        ["lbr: 1 unused golden trace(s) deleted: __lbr_golden__/test_suite/test_gone.lbr"]
    )
    assert used.exists() and variant.exists() and not orphan.exists()
    assert "unused golden" not in suite.runpytest().stdout.str()
    suite.runpytest("--help").stdout.fnmatch_lines(["*--lbr-golden-prune*delete golden traces*"])


@pytest.mark.slow
def test_unused_golden_files_under_xdist(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    suite.makepyfile(test_suite=many_golden_tests(4))
    suite.runpytest_subprocess("-n", "2", "--lbr-golden-update").assert_outcomes(passed=4)
    orphan = golden_file(suite, "test_gone")
    orphan.write_text(golden_file(suite, "test_many[3]").read_text())
    result = suite.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        ["lbr: 1 unused golden trace(s): __lbr_golden__/test_suite/test_gone.lbr *"]
    )
    assert result.stdout.str().count("unused golden") == 1
    suite.runpytest_subprocess("-n", "2", "--lbr-golden-prune").assert_outcomes(passed=4)
    assert not orphan.exists()


def test_only_the_plugin_imports_the_session() -> None:
    """The session is the top of the package: nothing else depends on it (no cycles)."""
    import ast

    importers = []
    for path in sorted((ROOT / "pytest_lbr").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "pytest_lbr.plugin.session":
                importers.append(path.relative_to(ROOT).as_posix())
            elif isinstance(node, ast.ImportFrom) and node.module == "pytest_lbr.plugin":
                if any(alias.name == "session" for alias in node.names):
                    importers.append(path.relative_to(ROOT).as_posix())
            elif isinstance(node, ast.Import):
                if any(alias.name == "pytest_lbr.plugin.session" for alias in node.names):
                    importers.append(path.relative_to(ROOT).as_posix())
    assert importers == ["pytest_lbr/plugin/__init__.py"]


# -- failure messages -------------------------------------------------------------------


def test_failed_called_explains_itself(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_suite="""
        from tracehelper import make_trace

        def test_called():
            trace = make_trace()
            assert trace.called("write_zero", by="vfs_write")

        def test_path():
            trace = make_trace(calls=("rw_verify_area", "write_null", "fsnotify"))
            assert trace.has_path("vfs_write", "write_null", "write_zero")
        """
    )
    result = suite.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*lbr: why the trace query failed*",
            "trace.called('write_zero', by='vfs_write') is False",
            "  no call into write_zero at all",
            "  vfs_write called: rw_verify_area, write_null",
            "trace: backend=graph kernel=6.12.117+deb12-amd64 hits=1 branches=4 lost=0",
            "Hit at kfunc:vfs_write: cpu=0 pid=1 tid=1 branches=4",
            "vfs_write",
            "  rw_verify_area * (fs/x.c:16)",
            "  write_null * (fs/x.c:17)",
            "(the whole trace: --lbr-report=DIR writes it; its branch records: trace.edges())",
        ]
    )
    # With --lbr-report, the message says where the whole trace is.
    rep = suite.path / "rep"
    suite.runpytest("--lbr-report=rep").stdout.fnmatch_lines(
        [f"(the whole trace: {rep / 'test_suite.py.test_called.txt'}; *"]
    )
    result.stdout.fnmatch_lines(
        [
            "trace.has_path('vfs_write', 'write_null', 'write_zero') is False",
            "  wanted:  vfs_write -> write_null -> write_zero",
            "  matched: vfs_write -> write_null  (2 of 3)",
            "  missing: write_zero",
            "  after write_null the trace went: vfs_write, fsnotify, vfs_write",
        ]
    )


def test_long_traces_are_cut_in_failure_messages(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_suite="""
        from tracehelper import make_trace

        def test_long():
            trace = make_trace(calls=tuple(f"f{i}" for i in range(100)))
            assert trace.called("nothing")
        """
    )
    result = suite.runpytest()
    lines = result.stdout.str().splitlines()
    tree = lines[
        lines.index("vfs_write") : lines.index(
            next(ln for ln in lines if ln.startswith("(the whole trace"))
        )
    ]
    # A tree of 101 lines cut to 40: its head, and how much more there is.
    assert len(tree) == 40 and tree[-1] == "\u2026 62 more line(s)", tree
    assert tree[1].startswith("  f0 ") and "f37 " in tree[-2]
    assert "f50+0x0" not in result.stdout.str()


# -- reports, JUnit, xdist, bisect --------------------------------------------------------


def test_report_and_junit_properties(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_suite=golden_test())
    suite.runpytest("--lbr-golden-update").assert_outcomes(passed=1)
    suite.makepyfile(test_suite=golden_test(calls=("rw_verify_area", "write_zero")))
    result = suite.runpytest("--lbr-report=rep", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    rep = suite.path / "rep"
    text = (rep / "test_suite.py.test_write.txt").read_text()
    tree = text.splitlines()[2:]
    assert tree[0] == "vfs_write" and tree[2].split() == ["write_zero", "(fs/x.c:17)"], text
    assert "\x1b[" not in text  # no colour in files
    page = (rep / "index.html").read_text()
    assert "<svg" in page and "write_zero" in page and "golden (expected)" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained
    junit = (suite.path / "junit.xml").read_text()
    assert f'<property name="lbr_trace" value="{rep / "test_suite.py.test_write.txt"}"' in junit
    assert (
        '<property name="lbr_golden" value="mismatch: __lbr_golden__/test_suite/test_write.lbr"'
        in junit
    )
    result.stdout.fnmatch_lines([f"lbr: report {rep / 'index.html'}"])
    # The branch records instead, for those who want them.
    suite.runpytest("--lbr-report=rep", "--lbr-edges").assert_outcomes(failed=1)
    text = (rep / "test_suite.py.test_write.txt").read_text()
    assert "vfs_write+0x11 (fs/x.c:17) -> write_zero+0x0 (fs/x.c:0)" in text


def test_xdist_updates_from_workers_and_summary_once(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    suite.makepyfile(test_suite=many_golden_tests(6))
    result = suite.runpytest_subprocess("-n", "2", "--lbr-golden-update", "--lbr-report=rep")
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    assert out.count("golden trace(s) written") == 1
    result.stdout.fnmatch_lines(["*lbr: 6 golden trace(s) written*"])
    for n in range(6):
        assert golden_file(suite, f"test_many[{n}]").exists()
    assert (suite.path / "rep" / "index.html").read_text().count('<svg class="tree"') == 6
    check = suite.runpytest_subprocess("-n", "2")
    check.assert_outcomes(passed=6)
    assert check.ret == 0


def test_bisect_run_exit_codes(suite: pytest.Pytester) -> None:
    """`git bisect run pytest ...` over commits that change the call path finds the first bad one."""
    if subprocess.run(["git", "--version"], capture_output=True).returncode:
        pytest.skip("git is not installed")
    suite.makepyfile(
        test_suite="""
        from tracehelper import make_trace
        from program import CALLS

        def test_write(lbr_golden):
            lbr_golden(make_trace(calls=CALLS))
        """
    )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=suite.path, env=env, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    versions = [("rw_verify_area", "write_null")] * 3 + [("rw_verify_area", "write_zero")] * 3
    for i, calls in enumerate(versions):
        (suite.path / "program.py").write_text(f"CALLS = {calls!r}  # v{i}\n")
        if i == 0:
            suite.runpytest_subprocess("--lbr-golden-update").assert_outcomes(passed=1)
            git("add", ".")
        git("commit", "-qam", f"v{i}")
    log = git("log", "--format=%H %s").split("\n")
    first_bad = next(h.split()[0] for h in log if h.endswith(" v3"))
    git("bisect", "start", "HEAD", "HEAD~5")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_suite.py"]
    out = git("bisect", "run", *cmd)
    assert f"{first_bad} is the first bad commit" in out


def test_ci_qemu_bisect_is_pytest_lbr_bisect(tmp_path: Path) -> None:
    """The old script runs `pytest-lbr bisect` (tests/test_bisect.py tests the command)."""
    from pytest_lbr.vm import VmError, find_tools

    try:
        find_tools()  # a kernel bisection checks for vng, QEMU and busybox first
    except VmError as exc:
        pytest.skip(str(exc))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    tree = tmp_path / "linux"
    tree.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    for tag in ("v6.11", "v6.12"):
        subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", tag], cwd=tree, env=env, check=True
        )
        subprocess.run(["git", "tag", tag], cwd=tree, check=True)
    script = ROOT / "ci" / "qemu" / "bisect"
    result = subprocess.run(
        [str(script), "--dry-run", "--kernel-src", str(tree), "--good", "v6.11", "--bad", "v6.12"]
        + ["--", "tests/kernel/test_plugin_kernel.py", "-k", "golden"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "PYTEST_LBR_VENV": str(Path(sys.executable).parent.parent)},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"git -C {tree} bisect start ")
    assert any("vng --build" in line and "CONFIG_FUNCTION_GRAPH_TRACER=y" in line for line in lines)
    assert any(
        f"vm --kernel {tree} --bisect" in line
        and line.endswith("-- --lbr --lbr-require tests/kernel/test_plugin_kernel.py -k golden")
        for line in lines
    )


def test_the_fixtures_are_typed_for_ides() -> None:
    """An IDE knows `lbr` is a Tracer, `bpf` a BpfLoader and `veth` a VethPair."""
    import typing
    from collections.abc import Generator

    import pytest_lbr.plugin as plugin
    from pytest_lbr.bpf import BpfLoader, VethPair
    from pytest_lbr.tracer import Tracer

    for fixture, cls in ((plugin.lbr, Tracer), (plugin.bpf, BpfLoader), (plugin.veth, VethPair)):
        hints = typing.get_type_hints(fixture.__wrapped__, vars(plugin) | {cls.__name__: cls})
        assert hints["return"] == Generator[cls, None, None], hints
