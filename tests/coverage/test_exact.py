"""Exact coverage on the host: real programs loaded again with a counter per block.

The host may load XDP programs and run them with BPF_PROG_TEST_RUN (no tracing is
needed: counters are not a trace). tests/bpf/many_arms.bpf.c's 24 arms each count
their own runs in `.bss`: the kernel's count of what ran, against which every line,
count and branch direction is checked. The guests run the same through pytest
(tests/kernel/test_coverage_exact.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader, BpfObject
from pytest_lbr.coverage.book import COUNTED, CoverageBook, ProgramCoverage
from pytest_lbr.coverage.exact import ExactCoverage
from pytest_lbr.coverage.formats import lcov
from tests.bpf.objects import SRC_DIR, XDP_PASS, bpf_object, require_root

pytest_plugins = ["pytester"]

ARMS = 24
SOURCE = SRC_DIR / "many_arms.bpf.c"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exact() -> Iterator[tuple[BpfLoader, ExactCoverage]]:
    require_root()
    counted = ExactCoverage()
    with BpfLoader(after_load=counted.after_load) as loader:
        yield loader, counted
    counted.close()


def _tags() -> dict[int, int]:
    """Line -> its arm (-1: the subprogram `account`), from the source's comments."""
    out = {}
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if m := re.search(r"/\* arm (\d+) \*/", text):
            out[n] = int(m[1])
        elif "/* sub: account */" in text:
            out[n] = -1
    return out


def _kernel_counts(obj: BpfObject) -> list[int]:
    """`arm_runs[0..23]`, then `accounted`: what the program itself counted."""
    raw = obj.maps["many_arm.bss"].lookup(0)
    assert raw is not None
    return [int.from_bytes(raw[8 * k : 8 * k + 8], "little") for k in range(ARMS + 1)]


def _run(obj: BpfObject, arms: dict[int, int]) -> None:
    prog = obj.programs["many_arms"]
    for arm, times in arms.items():
        for _ in range(times):
            prog.run(bytes([arm]) + bytes(63))


def _read(counted: ExactCoverage, context: str = "") -> ProgramCoverage:
    book = CoverageBook()
    counted.read_into(book, context)
    (cov,) = book.sorted()
    return cov


def test_every_line_counts_what_its_arm_counted(exact: tuple[BpfLoader, ExactCoverage]) -> None:
    loader, counted = exact
    obj = loader.load(bpf_object("many_arms"))
    assert counted.problems == []
    _run(obj, {arm: arm + 1 for arm in range(ARMS)})  # arm k runs k + 1 times
    cov = _read(counted)
    truth = _kernel_counts(obj)
    assert truth[:ARMS] == [arm + 1 for arm in range(ARMS)]
    assert cov.runs == sum(truth[:ARMS])
    tags = _tags()
    seen_arms = set()
    for (_, line), n in cov.lines.items():
        if line in tags:
            want = truth[ARMS] if tags[line] < 0 else truth[tags[line]]
            assert n == want, f"line {line} ({tags[line]}): counted {n}, the kernel {want}"
            assert cov.how[(_, line)] == COUNTED
            seen_arms.add(tags[line])
    assert seen_arms == {-1, *range(ARMS)}  # a line of every arm, and of `account`
    assert cov.directions_complete
    assert cov.functions["account"][1] < cov.functions["many_arms"][1]
    assert cov.function_runs("account") == truth[ARMS]


def test_branch_directions_add_up_arm_by_arm(exact: tuple[BpfLoader, ExactCoverage]) -> None:
    """One run of each arm shows the directions its path takes; the counts of a run of
    every arm (k + 1 times arm k) are then each direction's sum over the arms taking
    it, as the kernel counted them: no direction is guessed or left out."""
    loader, counted = exact
    obj = loader.load(bpf_object("many_arms"))
    paths = {}
    for arm in range(ARMS):
        _run(obj, {arm: 1})
        cov = _read(counted)
        paths[arm] = {(key, d) for key, dirs in cov.branches.items() for d in (0, 1) if dirs[d]}
        assert all(dirs[d] in (0, 1) for dirs in cov.branches.values() for d in (0, 1))
    before = _kernel_counts(obj)
    _run(obj, {arm: arm + 1 for arm in range(ARMS)})
    cov = _read(counted)
    truth = [n - b for n, b in zip(_kernel_counts(obj), before, strict=True)]
    assert len(cov.branches) >= ARMS - 1  # at least one jump per arm's test
    text = SOURCE.read_text().splitlines()
    tags = _tags()
    for key, dirs in cov.branches.items():
        line = key[0][1]
        if re.search(r"prandom|ktime", text[line - 1]):  # a coin's: its arm's runs in all
            assert sum(dirs) == truth[tags[line]], (key, dirs)
            continue
        for d in (0, 1):
            want = sum(truth[arm] for arm in range(ARMS) if (key, d) in paths[arm])
            assert dirs[d] == want, f"{key} direction {d}: counted {dirs[d]}, arms {want}"


def test_lcov_states_the_counts_and_renders(
    exact: tuple[BpfLoader, ExactCoverage], tmp_path: Path
) -> None:
    loader, counted = exact
    obj = loader.load(bpf_object("many_arms"))
    _run(obj, {0: 3, 20: 2})
    cov = _read(counted)
    text = lcov([cov], str(ROOT))
    da = {int(m[1]): int(m[2]) for m in re.finditer(r"^DA:(\d+),(\d+)$", text, re.M)}
    assert da == {ln: n for (_, ln), n in cov.lines.items()}
    brda = re.findall(r"^BRDA:(\d+),\d+,\d,(\S+)$", text, re.M)
    assert brda, "no branch records"
    for line, taken in brda:  # a direction of a line that ran is a count, never "-"
        assert (taken != "-") == bool(da[int(line)]), (line, taken)
    lines = SOURCE.read_text().splitlines()
    declared = next(n for n, t in enumerate(lines, 1) if re.search(r"\bint account\(", t))
    assert re.findall(r"^FN:(\d+),account$", text, re.M) == [str(declared)]
    info = tmp_path / "cov.info"
    info.write_text(text)
    if shutil.which("genhtml") is None:
        pytest.skip("genhtml is not installed (Debian: lcov; bash ci/setup installs it)")
    out = subprocess.run(
        ["genhtml", "--branch-coverage", "-o", str(tmp_path / "html"), str(info)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "html" / "index.html").is_file()


def test_each_test_keeps_its_own_counts(exact: tuple[BpfLoader, ExactCoverage]) -> None:
    loader, counted = exact
    obj = loader.load(bpf_object("many_arms"))
    book = CoverageBook()
    _run(obj, {0: 2, 1: 1})
    counted.read_into(book, "test_first")
    _run(obj, {1: 4, 2: 3})
    counted.read_into(book, "test_second")
    (cov,) = book.sorted()
    tags = _tags()
    first_line = {arm: min(ln for ln, a in tags.items() if a == arm) for arm in range(3)}
    where = cov.source
    assert cov.tests_of((where, first_line[0])) == ["test_first"]
    assert cov.tests_of((where, first_line[1])) == ["test_first", "test_second"]
    assert cov.for_test("test_second").lines[(where, first_line[1])] == 4
    assert cov.for_test("test_first").runs == 3
    assert cov.runs == 10


def test_a_program_without_room_for_counters_runs_as_it_was(
    exact: tuple[BpfLoader, ExactCoverage],
) -> None:
    """tests/bpf/full_stack.bpf.c: every register live at a block's start, its stack
    full: one line says why, the program loads and runs as written."""
    loader, counted = exact
    obj = loader.load(bpf_object("full_stack"))
    assert counted.problems == [
        "full_stack (full_stack.bpf.o) runs without counters: no stack left to spill "
        "registers into (it uses 512 of 512 bytes)"
    ]
    assert obj.programs["full_stack"].run(bytes(64)).retval == XDP_PASS
    assert counted.ids == set()


def test_a_counted_program_is_the_one_the_object_runs(
    exact: tuple[BpfLoader, ExactCoverage],
) -> None:
    """The object's program, its id and fd are the counted program's: what a test
    attaches or runs through `bpf.load` is counted."""
    loader, counted = exact
    obj = loader.load(bpf_object("many_arms"))
    prog = obj.programs["many_arms"]
    assert counted.ids == {prog.id}
    _run(obj, {5: 2})
    assert _read(counted).runs == 2


INNER = """
import pytest

@pytest.mark.parametrize("arm, times", [(0, 3), (21, 2)])
def test_arm(bpf, arm, times):
    prog = bpf.load({many!r}).programs["many_arms"]
    for _ in range(times):
        prog.run(bytes([arm]) + bytes(63))

def test_full(bpf):
    assert bpf.load({full!r}).programs["full_stack"].run(bytes(64)).retval == 2
"""


def test_pytest_lbr_cov_exact_needs_no_tracing(pytester: pytest.Pytester) -> None:
    """The plugin's path on the host: `--lbr-cov-exact` alone (no `--lbr`), through the
    `bpf` fixture; a test's own load each time, its counts under its own LCOV name."""
    require_root()
    pytester.makepyfile(
        test_inner=INNER.format(
            many=str(bpf_object("many_arms")), full=str(bpf_object("full_stack"))
        )
    )
    info = pytester.path / "cov.info"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--lbr-cov-exact",
        f"--lbr-cov-report=lcov:{info}",
    )
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "full_stack (full_stack.bpf.o) runs without counters: no stack left" in out
    said = re.search(
        r"covered lines: \d+ counted \(exact mode's counters\); the rest were (.*)", out
    )
    assert said is not None
    merged = re.search(r"many_arms: \d+ block runs were of code of no one line", out)
    # "not run" only while every counted run went to a line
    assert said[1].startswith("not observed" if merged else "not run")
    sets = {s.split("\n", 1)[0]: s for s in info.read_text().split("TN:")[1:]}
    tags = _tags()
    first = {arm: min(ln for ln, a in tags.items() if a == arm) for arm in (0, 21)}
    for arm, times in ((0, 3), (21, 2)):
        (text,) = [s for name, s in sets.items() if name.endswith(f"test_arm_{arm}_{times}_")]
        assert f"DA:{first[arm]},{times}\n" in text
        other = first[21 if arm == 0 else 0]
        assert not re.search(rf"^DA:{other},[1-9]", text, re.M)


def test_inlined_calls_count_at_the_lines_that_called_them(
    exact: tuple[BpfLoader, ExactCoverage],
) -> None:
    """examples/xdp_filter inlines `count()`: the caller's `count(STAT_DENIED);` and
    `count(STAT_PASS);` are code, counted as the packets that went each way (the
    object's DWARF); the call for a bad checksum, which no packet took, is 0."""
    import sys

    example = ROOT / "examples" / "xdp_filter"
    obj_path = example / "build" / "xdp_filter.bpf.o"
    if not obj_path.exists():
        pytest.skip("examples are not built (bash ci/setup builds them)")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from packets import eth, ipv4, udp
    finally:
        sys.path.remove(str(ROOT / "examples"))
    loader, counted = exact
    obj = loader.load(obj_path)
    obj.maps["denylist"].update(bytes([192, 0, 2, 66]), b"\x01")
    prog = obj.programs["xdp_filter"]
    for _ in range(3):
        assert prog.run(eth(ipv4(udp(b"deny"), src="192.0.2.66"))).retval == 1  # XDP_DROP
    for _ in range(2):
        assert prog.run(eth(ipv4(udp(b"pass"), src="192.0.2.1"))).retval == XDP_PASS
    cov = _read(counted)
    source = (example / "xdp_filter.bpf.c").read_text().splitlines()

    def at(text: str) -> int:
        (line,) = [n for n, t in enumerate(source, 1) if text in t]
        return cov.lines[(cov.source, line)]

    assert (at("count(STAT_DENIED);"), at("count(STAT_PASS);")) == (3, 2)
    assert at("count(STAT_BAD_CSUM);") == 0
