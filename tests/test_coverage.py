"""BPF program coverage (`pytest_lbr.coverage`) on real programs loaded on this host.

The example `examples/branch_cover` has one branch with two arms. Its real JIT
image, translated instructions and line records come from the kernel (root can
load XDP programs here); the LBR records are built by walking that JIT code
along one arm, as the CPU would record it (no machine here has LBR), and the
function tracer's call sites are its real call instructions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_lbr.bytecode.flow import control_flow
from pytest_lbr.coverage.book import EXECUTED, PROVEN, CoverageBook, ProgramCoverage
from pytest_lbr.coverage.evidence import graph_run, lbr_run
from pytest_lbr.coverage.formats import (
    REPORT_WRITERS,
    cobertura,
    lcov,
    line_ranges,
    report_text,
    term_missing,
)
from pytest_lbr.coverage.program import read_code
from pytest_lbr.model import Branch, Hit, Location, Trace
from pytest_lbr.names import CoverageFormat
from pytest_lbr.programs.lines import jited_image
from pytest_lbr.results import CoverageRecord, append_record, read_results
from pytest_lbr.symbols.disasm import Instruction, disassemble
from tests.bpf.objects import require_root

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "examples" / "branch_cover" / "branch_cover.bpf.c"
OBJECT = ROOT / "examples" / "branch_cover" / "build" / "branch_cover.bpf.o"
SPEC = "prog:name:branch_cover"
#: Where a hook's trampoline called the program from and is returned to (any
#: address outside the program serves: the walk only needs them to be outside).
TRAMPOLINE = 0xFFFF_FFFF_A000_0000


def _marked(marker: str) -> set[int]:
    return {n for n, text in enumerate(SOURCE.read_text().splitlines(), 1) if marker in text}


BRANCH = next(iter(_marked("if (eth->h_proto")))


class Loaded:
    """The example program loaded here: its code and its JIT instructions."""

    def __init__(self) -> None:
        from pytest_lbr.bpf import BpfObject

        if not OBJECT.exists():
            pytest.skip(f"{OBJECT} not built: run `make -C examples`")
        self.obj = BpfObject(OBJECT)
        self.prog = self.obj.programs["branch_cover"]
        self.code = read_code(self.prog.fd, "x86_64", self.obj.written)
        # The lines of each arm that have code (a `return` of a constant has none).
        code_lines = _lines(set(self.code.lines))
        self.ipv4 = _marked("/* arm: ipv4 */") & code_lines
        self.other = _marked("/* arm: other */") & code_lines
        start, image = jited_image(self.prog.fd)
        main = self.code.functions[0]
        self.insns = disassemble(image[: main.jit_end - main.jit_start], start)

    def line(self, addr: int) -> int:
        k = self.code.record_at(addr)
        line = self.code.line_of(k) if k is not None else None
        return line[1] if line else 0

    def walk(self, take: Callable[[int], bool]) -> list[Branch]:
        """The LBR records of one run, oldest first: taken jumps, calls and returns
        along the JIT code, a conditional jump taken where `take(its line)`."""
        by_addr = {i.addr: i for i in self.insns}
        inside = self.code.function_at
        entry = self.code.functions[0].jit_start
        out = [Branch(Location(TRAMPOLINE), Location(entry), "call")]
        pc = entry
        for _ in range(len(self.insns) + 1):
            ins: Instruction = by_addr[pc]
            nxt = pc + ins.size
            target = int(ins.operands, 16) if ins.operands.startswith("0x") else None
            if ins.mnemonic == "call" and target is not None:
                out.append(Branch(Location(pc), Location(target), "call"))
                out.append(Branch(Location(target + 0x10), Location(target + 0x30), "cond"))
                out.append(Branch(Location(target + 0x40), Location(nxt), "ret"))
                pc = nxt
            elif ins.mnemonic.startswith("j") and ins.mnemonic != "jmp" and target is not None:
                if take(self.line(pc)):
                    out.append(Branch(Location(pc), Location(target), "cond"))
                    pc = target
                else:
                    pc = nxt
            elif ins.mnemonic == "jmp" and target is not None and inside(target) is not None:
                out.append(Branch(Location(pc), Location(target), "jmp"))
                pc = target
            elif ins.mnemonic in ("ret", "jmp"):  # the return, or its thunk
                out.append(Branch(Location(pc), Location(target or TRAMPOLINE + 8), "ret"))
                return out
            else:
                pc = nxt
        raise AssertionError("the walk never returned")

    def calls_on(self, lines: set[int]) -> list[int]:
        """The return addresses of the JIT's calls on `lines` (what the function
        tracer records as the call site)."""
        return [
            i.addr + i.size
            for i in self.insns
            if i.mnemonic == "call" and self.line(i.addr) in lines
        ]


@pytest.fixture(scope="module")
def loaded() -> Iterator[Loaded]:
    require_root()
    prog = Loaded()
    yield prog
    prog.obj.close()


def _lines(found: set[tuple[str, int]]) -> set[int]:
    return {ln for f, ln in found if f.endswith("branch_cover.bpf.c")}


def _runs(loaded: Loaded) -> tuple[list[Branch], list[Branch]]:
    """One run along each arm: the branch's jump taken, and not."""
    return loaded.walk(lambda line: line == BRANCH), loaded.walk(lambda line: False)


def test_the_source_lines_are_the_programs_line_records(loaded: Loaded) -> None:
    code = loaded.code
    assert code.name == "branch_cover" and code.source.endswith("branch_cover.bpf.c")
    assert loaded.ipv4 | loaded.other | {BRANCH} <= _lines(set(code.lines))
    assert 0 not in _lines(set(code.lines))  # line-0 records are no source line


def test_each_arm_is_a_block_the_branch_dominates(loaded: Loaded) -> None:
    code = loaded.code
    flow = code.flow
    arm = {
        name: {b for b in range(len(flow.blocks)) if _lines(code.block_lines(b)) & lines}
        for name, lines in (("ipv4", loaded.ipv4), ("other", loaded.other))
    }
    assert arm["ipv4"] and arm["other"] and not arm["ipv4"] & arm["other"]
    for a, b in (("ipv4", "other"), ("other", "ipv4")):
        for blk in arm[a]:
            # The entry dominates each arm; neither arm dominates the other.
            assert flow.entries[0] in flow.proven_by(blk)
            assert not flow.proven_by(blk) & arm[b]


def test_lbr_records_show_the_arm_a_run_took_and_its_direction(loaded: Loaded) -> None:
    taken, fell = _runs(loaded)
    one, two = (lbr_run(loaded.code, r, entered=True) for r in (taken, fell))
    assert one.entered and two.entered
    for ev in (one, two):
        # Each run executed one arm whole and none of the other.
        arms = [lines for lines in (loaded.ipv4, loaded.other) if lines <= _lines(ev.executed)]
        assert len(arms) == 1 and not _lines(ev.executed) & (loaded.ipv4 | loaded.other) - arms[0]
        assert BRANCH in _lines(ev.executed)
    assert _lines(one.executed) & loaded.ipv4 != _lines(two.executed) & loaded.ipv4
    # The branch's jump: taken in one run, fallen through in the other.
    directions = [
        (d1, d2)
        for (line, n), d1 in one.branches.items()
        if line[1] == BRANCH and (d2 := two.branches[(line, n)])
    ]
    assert ({True}, {False}) in directions


def test_a_run_cut_by_the_window_counts_only_what_its_records_show(loaded: Loaded) -> None:
    full, _ = _runs(loaded)
    last = full[-3:]  # the window kept the last three records
    ev = lbr_run(loaded.code, last, entered=True)
    assert not ev.entered
    whole = lbr_run(loaded.code, full, entered=True)
    assert _lines(ev.executed) < _lines(whole.executed)
    # The run's entry block is still proven: it is a run of this program.
    entry = _lines(loaded.code.block_lines(loaded.code.flow.entries[0]))
    assert entry and entry <= _lines(ev.proven | ev.executed)
    assert not entry <= _lines(ev.executed)
    cov = ProgramCoverage("branch_cover", loaded.code.source)
    cov.add_code(loaded.code)
    cov.add_run(ev, backend="lbr", counted=True)
    assert (cov.runs, cov.cut_by_window) == (1, 1)
    assert "1 of 1 runs were cut by the LBR window" in "\n".join(term_missing([cov]))


def test_a_recorded_call_proves_its_arm_and_what_dominates_it(loaded: Loaded) -> None:
    for arm, other in ((loaded.ipv4, loaded.other), (loaded.other, loaded.ipv4)):
        ev = graph_run(loaded.code, loaded.calls_on(arm), entered=True)
        assert arm <= _lines(ev.proven) and BRANCH in _lines(ev.proven)
        assert not _lines(ev.proven) & other
        assert not ev.executed  # proven, never "executed": nothing recorded the lines
    # A run with no recorded call proves its entry block only.
    alone = graph_run(loaded.code, [], entered=True)
    assert _lines(alone.proven) and not _lines(alone.proven) & (
        loaded.ipv4 | loaded.other | {BRANCH}
    )


def _trace(backend: str, branches: list[Branch]) -> Trace:
    return Trace(targets=[SPEC], backend=backend, hits=[Hit(SPEC, branches=branches)])


def _graph_branches(loaded: Loaded, lines: set[int]) -> list[Branch]:
    return [Branch(Location(r), Location(TRAMPOLINE), "call") for r in loaded.calls_on(lines)]


@pytest.mark.parametrize("backend", ["lbr", "graph"])
def test_alone_each_test_leaves_the_other_arm_not_observed_together_both(
    loaded: Loaded, backend: str
) -> None:
    taken, fell = _runs(loaded)
    if backend == "lbr":
        tests = [_trace("lbr", taken), _trace("lbr", fell)]
    else:
        tests = [
            _trace("graph", _graph_branches(loaded, loaded.ipv4)),
            _trace("graph", _graph_branches(loaded, loaded.other)),
        ]
    codes, targets = {loaded.prog.id: loaded.code}, {SPEC: loaded.prog.id}
    alone = []
    for trace in tests:
        book = CoverageBook()
        book.add_trace(trace, codes, targets)
        (cov,) = book.sorted()
        covered = {ln for (_, ln), n in cov.lines.items() if n}
        alone.append(covered)
        how = {cov.how[line] for line in cov.lines if cov.lines[line]}
        assert how <= ({EXECUTED, PROVEN} if backend == "lbr" else {PROVEN})
    assert {frozenset(c & (loaded.ipv4 | loaded.other)) for c in alone} == {
        frozenset(loaded.ipv4),
        frozenset(loaded.other),
    }
    together = CoverageBook()
    for trace in tests:
        together.add_trace(trace, codes, targets)
    (cov,) = together.sorted()
    assert cov.runs == 2
    assert loaded.ipv4 | loaded.other <= {ln for (_, ln), n in cov.lines.items() if n}
    row = term_missing([cov])[2]
    assert row.split()[:2] == ["branch_cover", cov.source]


def _both_arms(loaded: Loaded) -> ProgramCoverage:
    book = CoverageBook()
    for lines in (loaded.ipv4, loaded.other):
        trace = _trace("graph", _graph_branches(loaded, lines))
        book.add_trace(trace, {loaded.prog.id: loaded.code}, {SPEC: loaded.prog.id})
    return book.sorted()[0]


def test_records_merge_across_sessions(loaded: Loaded, tmp_path: Path) -> None:
    cov = _both_arms(loaded)
    path = tmp_path / "results.jsonl"
    for _ in range(2):  # two shards (or kernels) of the same suite
        append_record(path, CoverageRecord(**cov.to_record()))
    merged = CoverageBook()
    for record in read_results(path).coverage:
        merged.merge(ProgramCoverage.from_record(asdict(record)))
    (both,) = merged.sorted()
    assert both.runs == 2 * cov.runs
    assert {k: 2 * n for k, n in cov.lines.items()} == both.lines
    assert both.how == cov.how


def test_lcov_renders_with_genhtml_and_cobertura_parses(loaded: Loaded, tmp_path: Path) -> None:
    cov = _both_arms(loaded)
    info = lcov([cov], str(ROOT))
    assert f"SF:{SOURCE}" in info.splitlines()
    for line in loaded.ipv4 | loaded.other:
        assert f"DA:{line},1" in info.splitlines()
    xml = ET.fromstring(cobertura([cov], str(ROOT)))
    hits = {int(e.get("number", 0)): int(e.get("hits", 0)) for e in xml.iter("line")}
    assert all(hits[line] == 1 for line in loaded.ipv4 | loaded.other)
    if shutil.which("genhtml") is None:
        pytest.skip("genhtml is not installed (Debian: lcov; bash ci/setup installs it)")
    (tmp_path / "cov.info").write_text(info)
    proc = subprocess.run(
        ["genhtml", "-q", "-o", str(tmp_path / "html"), str(tmp_path / "cov.info")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "html" / "index.html").exists()


def _brda(info: str) -> dict[tuple[int, int, int], str]:
    """LCOV's BRDA records: (line, block, branch) -> count or "-"."""
    out = {}
    for rec in info.splitlines():
        if rec.startswith("BRDA:"):
            ln, blk, br, count = rec.removeprefix("BRDA:").split(",")
            out[(int(ln), int(blk), int(br))] = count
    return out


def test_graph_coverage_claims_no_branch_direction(loaded: Loaded) -> None:
    """The function tracer records calls, not jumps: a direction is never shown, so
    none is claimed not taken ("-", not 0), though the jump's line ran."""
    cov = _both_arms(loaded)
    assert not cov.directions_complete
    brda = _brda(lcov([cov], str(ROOT)))
    assert brda and set(brda.values()) == {"-"}
    assert any(ln == BRANCH for ln, _, _ in brda)
    assert "BRH:0" in lcov([cov], str(ROOT)).splitlines()
    xml = ET.fromstring(cobertura([cov], str(ROOT)))
    assert (xml.get("branches-valid"), xml.get("branch-rate")) == ("0", "0")


def test_lbr_runs_from_the_entry_claim_the_directions_not_taken(loaded: Loaded) -> None:
    taken, fell = _runs(loaded)
    cov = ProgramCoverage("branch_cover", loaded.code.source)
    cov.add_code(loaded.code)
    cov.add_run(lbr_run(loaded.code, taken, entered=True), backend="lbr", counted=True)
    assert cov.directions_complete
    on_branch = {k: v for k, v in _brda(lcov([cov], str(ROOT))).items() if k[0] == BRANCH}
    # One run took the branch's jump: that direction 1, the other proven 0.
    assert sorted(on_branch.values()) == ["0", "1"]
    assert _rate_of(cobertura([cov], str(ROOT))) == "0.5000"
    # A run cut by the LBR window may have gone either way before its records begin.
    cov.add_run(lbr_run(loaded.code, fell[-3:], entered=True), backend="lbr", counted=True)
    assert not cov.directions_complete
    on_branch = {k: v for k, v in _brda(lcov([cov], str(ROOT))).items() if k[0] == BRANCH}
    assert "0" not in on_branch.values() and "1" in on_branch.values()
    # Records merged from another session keep what they knew.
    again = ProgramCoverage.from_record(cov.to_record())
    assert (again.unknown_direction_runs, again.functions) == (1, cov.functions)


def _rate_of(xml: str) -> str | None:
    return ET.fromstring(xml).get("branch-rate")


def test_each_bpf_function_is_an_lcov_function_at_its_declaration(loaded: Loaded) -> None:
    """BTF line info starts at a function's first statement (line 22 of
    branch_cover.bpf.c); the function is declared two lines above."""
    cov = _both_arms(loaded)
    first = next(r for r in loaded.code.records if r.line)
    source = (ROOT / first.file).read_text().splitlines()
    declared = next(n for n, text in enumerate(source, 1) if "int branch_cover(" in text)
    assert declared < first.line
    assert cov.functions == {"branch_cover": (first.file, declared, first.line)}
    info = lcov([cov], str(ROOT)).splitlines()
    assert f"FN:{declared},branch_cover" in info
    assert f"FNDA:{cov.runs},branch_cover" in info
    assert ["FNF:1", "FNH:1"] == [r for r in info if r.startswith(("FNF", "FNH"))]


def test_every_report_format_has_its_writer_and_sets_by_test_stay_apart(loaded: Loaded) -> None:
    """A format named in `CoverageFormat` without a writer would be written as another."""
    assert set(REPORT_WRITERS) == set(CoverageFormat)
    cov = _both_arms(loaded)
    two = {"kernel_6_1": [cov], "kernel_6_12": [cov]}
    info = report_text(CoverageFormat.LCOV, two, str(ROOT))
    assert info == lcov([cov], str(ROOT), "kernel_6_1") + lcov([cov], str(ROOT), "kernel_6_12")
    merged = ET.fromstring(report_text(CoverageFormat.COBERTURA, two, str(ROOT)))
    hits = {int(e.get("number", 0)): int(e.get("hits", 0)) for e in merged.iter("line")}
    assert all(hits[line] == 2 for line in loaded.ipv4 | loaded.other)  # summed
    one = report_text(CoverageFormat.COBERTURA, {"": [cov]}, str(ROOT))
    assert _without_timestamp(one) == _without_timestamp(cobertura([cov], str(ROOT)))


def _without_timestamp(xml: str) -> str:
    return re.sub(r'timestamp="\d+"', "", xml)


def test_missing_lines_run_on_over_lines_without_code() -> None:
    assert line_ranges([3, 4, 6, 9], [1, 3, 4, 6, 8, 9]) == "3-6, 9"
    assert line_ranges([], [1, 2]) == ""


def test_dominators_over_a_guests_translated_instructions() -> None:
    # xdp_count as the 6.12 guest translated it (tests/data/helpers-6.12.json): the
    # lookup's block dominates both arms of `if (n)`; neither arm dominates the other.
    import json

    data = json.loads((ROOT / "tests" / "data" / "helpers-6.12.json").read_text())
    xlated = next(bytes.fromhex(p["xlated"]) for p in data["programs"] if p["name"] == "xdp_count")
    flow = control_flow(xlated)
    lookup, update, add = (flow.block_of[i] for i in (21, 35, 26))
    assert lookup in flow.proven_by(update) and lookup in flow.proven_by(add)
    assert add not in flow.proven_by(update) and update not in flow.proven_by(add)
    assert flow.proven_by(flow.entries[0]) == frozenset({flow.entries[0]})


def _marks(page: str) -> dict[int, str]:
    """Line number -> its mark, from the coverage section's source table."""
    from html.parser import HTMLParser

    marks: dict[int, str] = {}

    class Rows(HTMLParser):
        cls = ""
        cells: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "tr":
                self.cls, self.cells = dict(attrs).get("class") or "", []
            elif tag == "td":
                self.cells.append("")

        def handle_data(self, data: str) -> None:
            if self.cells:
                self.cells[-1] += data

        def handle_endtag(self, tag: str) -> None:
            if tag == "tr" and self.cells:
                marks[int(self.cells[0])] = self.cls

    Rows().feed(page)
    return marks


#: A test's part of the report page, as `report.write_test_files` writes it.
_PART = {
    "nodeid": "examples/branch_cover/test_branch_cover.py::test_ipv4_takes_the_first_arm",
    "outcome": "passed",
    "text": "t.txt",
    "traces": [],
    "golden": [],
}


def test_the_report_marks_each_line_of_the_source(loaded: Loaded, tmp_path: Path) -> None:
    from pytest_lbr.coverage.html import section, write_part
    from pytest_lbr.report.render import write_html

    book = CoverageBook()
    trace = _trace("graph", _graph_branches(loaded, loaded.ipv4))
    book.add_trace(trace, {loaded.prog.id: loaded.code}, {SPEC: loaded.prog.id})
    write_part(tmp_path, book.sorted())
    # The page is built from the tests' parts beside it (one here), in the working directory.
    (tmp_path / ".parts").mkdir(exist_ok=True)
    (tmp_path / ".parts" / "t.json").write_text(json.dumps(_PART))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        page = write_html(tmp_path).read_text()  # type: ignore[union-attr]
    assert "examples/branch_cover/test_branch_cover.py::test_ipv4" in page
    assert '<a href="#coverage">' in page and '<h2 id="coverage">' in page  # linked at the top
    marks = _marks(page)
    assert all(marks[line] == "proven" for line in loaded.ipv4 | {BRANCH})
    assert all(marks[line] == "not-observed" for line in loaded.other)
    text = SOURCE.read_text().splitlines()
    blank = next(n for n in range(BRANCH, 0, -1) if not text[n - 1].strip())
    assert marks[blank] == ""  # a line without code is shown unmarked
    write_part(tmp_path, [_both_arms(loaded)])
    marks = _marks(section(tmp_path, cwd=ROOT))
    assert all(marks[line] == "proven" for line in loaded.ipv4 | loaded.other)
    assert section(tmp_path / "none") == ""  # no coverage part: no section


def _per_test(loaded: Loaded) -> ProgramCoverage:
    """Two tests, each running one arm once (its node id the context)."""
    book = CoverageBook()
    for test, lines in ((IPV4_TEST, loaded.ipv4), (OTHER_TEST, loaded.other)):
        trace = _trace("graph", _graph_branches(loaded, lines))
        book.add_trace(trace, {loaded.prog.id: loaded.code}, {SPEC: loaded.prog.id}, context=test)
    return book.sorted()[0]


IPV4_TEST = "examples/branch_cover/test_branch_cover.py::test_ipv4"
OTHER_TEST = "examples/branch_cover/test_branch_cover.py::test_other[1]"


def test_each_line_knows_the_tests_that_ran_it(loaded: Loaded, tmp_path: Path) -> None:
    cov = _per_test(loaded)
    only_ipv4 = loaded.ipv4 - loaded.other
    only_other = loaded.other - loaded.ipv4
    assert only_ipv4 and only_other
    file = next(f for f, _ in cov.lines)
    assert all(cov.tests_of((file, ln)) == [IPV4_TEST] for ln in only_ipv4)
    assert all(cov.tests_of((file, ln)) == [OTHER_TEST] for ln in only_other)
    assert cov.tests_of((file, BRANCH)) == [IPV4_TEST, OTHER_TEST]  # both ran the `if`
    one = cov.for_test(IPV4_TEST)
    assert one.runs == 1 and set(one.lines) == set(cov.lines)  # every line, one test's counts
    assert {ln for (_, ln), n in one.lines.items() if n} == _lines(
        {line for line, n in cov.lines.items() if IPV4_TEST in cov.tests_of(line)}
    )
    assert sum(cov.for_test(t).runs for t in cov.contexts) == cov.runs
    # Kept in the results file, summed over shards per test.
    path = tmp_path / "results.jsonl"
    for _ in range(2):
        append_record(path, CoverageRecord(**cov.to_record()))
    merged = CoverageBook()
    for record in read_results(path).coverage:
        merged.merge(ProgramCoverage.from_record(asdict(record)))
    (both,) = merged.sorted()
    other = cov.for_test(OTHER_TEST).lines
    assert both.for_test(OTHER_TEST).lines == {k: 2 * n for k, n in other.items()}
    # A record from before contexts: its runs in one unnamed context.
    old = {k: v for k, v in cov.to_record().items() if k != "contexts"}
    assert list(ProgramCoverage.from_record(old).contexts) == [""]


def test_lcov_has_a_test_name_per_test_and_sums_to_the_whole(
    loaded: Loaded, tmp_path: Path
) -> None:
    cov = _per_test(loaded)
    info = report_text(CoverageFormat.LCOV, {"": [cov]}, str(ROOT))
    names = [r.removeprefix("TN:") for r in info.splitlines() if r.startswith("TN:")]
    assert names == ["", re.sub(r"\W", "_", IPV4_TEST), re.sub(r"\W", "_", OTHER_TEST)]
    whole = lcov([cov], str(ROOT))
    if shutil.which("lcov") is None or shutil.which("genhtml") is None:
        pytest.skip("lcov is not installed (Debian: lcov; bash ci/setup installs it)")
    summaries = []
    for name, text in (("tests", info), ("whole", whole)):
        (tmp_path / f"{name}.info").write_text(text)
        proc = subprocess.run(
            ["lcov", "--summary", str(tmp_path / f"{name}.info")],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        summaries.append(
            re.findall(r"(lines|functions)\.*: ([\d.]+%) \((\d+) of (\d+)", proc.stdout)
        )
    assert summaries[0] and summaries[0] == summaries[1]  # the tests' sets sum to the whole
    proc = subprocess.run(
        [
            "genhtml",
            "-q",
            "--show-details",
            "-o",
            str(tmp_path / "html"),
            str(tmp_path / "tests.info"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    details = "".join(p.read_text() for p in (tmp_path / "html").rglob("*.html"))
    assert re.sub(r"\W", "_", OTHER_TEST) in details  # genhtml names the tests


def test_the_html_report_shows_the_tests_of_each_line(loaded: Loaded, tmp_path: Path) -> None:
    from pytest_lbr.coverage.html import section, write_part

    cov = _per_test(loaded)
    write_part(tmp_path, [cov])
    page = section(tmp_path, ROOT)
    row = next(r for r in page.split("<tr") if f'<td class="n">{BRANCH}</td>' in r)
    assert "2 test(s)" in row and "test_ipv4" in row and "test_other[1]" in row
    only_ipv4 = min(loaded.ipv4 - loaded.other)
    row = next(r for r in page.split("<tr") if f'<td class="n">{only_ipv4}</td>' in r)
    assert "1 test(s)" in row and "test_other" not in row
