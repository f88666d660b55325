"""Coverage as people and CI services read it: pytest-cov's term-missing table, LCOV,
Cobertura XML. Pure: each function takes the programs' coverage and returns text."""

from __future__ import annotations

import os
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence

from pytest_lbr.coverage.book import COUNTED, EXECUTED, PROVEN, CoverageBook, ProgramCoverage
from pytest_lbr.names import CoverageFormat

__all__ = [
    "REPORT_WRITERS",
    "cobertura",
    "lcov",
    "line_ranges",
    "markdown",
    "report_text",
    "term_missing",
]


def line_ranges(missing: Sequence[int], lines: Sequence[int]) -> str:
    """Missing lines as ranges, as coverage.py writes them: a range runs on over
    lines without code ("43-46" when 45 has none)."""
    out: list[str] = []
    want = set(missing)
    start = prev = None
    for ln in sorted(lines):
        if ln in want:
            if start is None:
                start = ln
            prev = ln
        elif start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def _percent(covered: int, total: int) -> str:
    return f"{100 * covered // total if total else 100}%"


def _rows(programs: Sequence[ProgramCoverage]) -> tuple[list[tuple[str, ...]], dict[str, int]]:
    """One row per program and source file (program, file, lines, covered, percent,
    not observed), and how many covered lines are known each way (`ProgramCoverage.how`)."""
    rows: list[tuple[str, ...]] = []
    known = {EXECUTED: 0, PROVEN: 0, COUNTED: 0}
    for cov in programs:
        for file in cov.files():
            lines = cov.file_lines(file)
            covered = [ln for ln, c in lines.items() if c]
            missing = [ln for ln, c in lines.items() if not c]
            name = cov.program if file == cov.source else f"  {cov.program}"
            rows.append(
                (
                    name,
                    file,
                    str(len(lines)),
                    str(len(covered)),
                    _percent(len(covered), len(lines)),
                    line_ranges(missing, list(lines)),
                )
            )
            for ln in covered:
                how = cov.how.get((file, ln))
                if how in known:
                    known[how] += 1
    return rows, known


def _notes(programs: Sequence[ProgramCoverage], known: dict[str, int]) -> list[str]:
    said = [
        f"{known[EXECUTED]} executed (LBR records show them)",
        f"{known[PROVEN]} proven (the control flow proves them)",
    ]
    if known[COUNTED]:
        said.append(f"{known[COUNTED]} counted (exact mode's counters)")
    rest = "not observed"
    if programs and all(c.backends == {COUNTED} for c in programs):
        said = said[2:]
        if all(c.all_runs_attributed for c in programs):
            rest = "not run (the counters count every run)"
    out = [f"covered lines: {', '.join(said)}; the rest were {rest}"]
    for cov in programs:
        if cov.unattributed_runs:
            out.append(
                f"{cov.program}: {cov.unattributed_runs} block runs were of code of no one line "
                "(the compiler merged it): a line counted 0 may have run there"
            )
    for cov in programs:
        if cov.cut_by_window:
            out.append(
                f"{cov.program}: {cov.cut_by_window} of {cov.runs} runs were cut by the LBR "
                "window: only what their records show is counted"
            )
    return out


_HEADER = ("Program", "Source", "Lines", "Covered", "Cover", "Not observed")


def term_missing(programs: Sequence[ProgramCoverage]) -> list[str]:
    """One line per program and source file: program, file, lines, covered, percent,
    and the lines not observed; then what the labels mean and the LBR window's cuts."""
    body, known = _rows(programs)
    rows = [_HEADER, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = []
    for r in rows:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        cells += [r[i].rjust(widths[i]) for i in (2, 3, 4)]
        out.append("  ".join([*cells, r[5]]).rstrip())
    out.insert(1, "-" * max(len(line) for line in out))
    return out + _notes(programs, known)


def markdown(programs: Sequence[ProgramCoverage]) -> list[str]:
    """The term-missing table as Markdown (a CI summary's), then the same notes."""
    body, known = _rows(programs)
    out = ["| " + " | ".join(_HEADER) + " |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for name, file, *rest in body:
        cells = [f"`{name.strip()}`", f"`{file}`", *rest]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, "", *_notes(programs, known)]


def _by_file(programs: Sequence[ProgramCoverage]) -> dict[str, list[ProgramCoverage]]:
    files: dict[str, list[ProgramCoverage]] = {}
    for cov in programs:
        for file in cov.files():
            files.setdefault(file, []).append(cov)
    return dict(sorted(files.items()))


def lcov(programs: Sequence[ProgramCoverage], cwd: str | None = None, test: str = "") -> str:
    """LCOV tracefile text: one record per source file (programs sharing a file are
    summed), paths made absolute against `cwd` so genhtml finds the sources. `test`:
    the test name of its records (LCOV's `TN:`, letters, digits and `_`; `pytest-lbr
    vm` names one per kernel, and genhtml and `lcov -a` sum them)."""
    base = cwd or os.getcwd()
    out = ["TN:" + re.sub(r"\W", "_", test)]
    for file, covs in _by_file(programs).items():
        out.append(f"SF:{os.path.join(base, file)}")
        # A function per BPF function, at its own first line: programs sharing a
        # subprogram's source (each loads a copy) sum its runs.
        functions: dict[str, list[int]] = {}
        for cov in covs:
            for name, (f, ln, _) in cov.functions.items():
                if f == file:
                    functions.setdefault(name, [ln, 0])[1] += cov.function_runs(name)
        for name, (ln, _) in functions.items():
            out.append(f"FN:{ln},{name}")
        for name, (_, runs) in functions.items():
            out.append(f"FNDA:{runs},{name}")
        out.append(f"FNF:{len(functions)}")
        out.append(f"FNH:{sum(1 for _, runs in functions.values() if runs)}")
        counts: dict[int, int] = {}
        for cov in covs:
            for ln, c in cov.file_lines(file).items():
                counts[ln] = counts.get(ln, 0) + c
        branches = 0
        hit = 0
        for i, cov in enumerate(covs):  # a block per jump: the program's index, then its own
            for ((f, ln), n), (taken, fell) in sorted(cov.branches.items()):
                if f != file:
                    continue
                for br, count in ((0, taken), (1, fell)):
                    out.append(
                        f"BRDA:{ln},{i * 1000 + n},{br},{_direction(cov, ln, count, counts)}"
                    )
                    branches += 1
                    hit += count > 0
        out.append(f"BRF:{branches}")
        out.append(f"BRH:{hit}")
        for ln, c in sorted(counts.items()):
            out.append(f"DA:{ln},{c}")
        out.append(f"LF:{len(counts)}")
        out.append(f"LH:{sum(1 for c in counts.values() if c)}")
        out.append("end_of_record")
    return "\n".join(out) + "\n"


def _direction(cov: ProgramCoverage, line: int, count: int, counts: Mapping[int, int]) -> str:
    """A branch direction as LCOV's BRDA gives it: the runs that took it; "0" only
    where that is known (its line ran, and every run showed every direction:
    `directions_complete`); else "-", no claim (graph records show calls, not jumps;
    an LBR run cut by its window misses some)."""
    if count:
        return str(count)
    return "0" if counts.get(line) and cov.directions_complete else "-"


def _rate(covered: int, total: int) -> str:
    return f"{covered / total if total else 1:.4f}"


def cobertura(programs: Sequence[ProgramCoverage], cwd: str | None = None) -> str:
    """Cobertura XML: a package per source file, a class per program in it."""
    valid = sum(len(c.lines) for c in programs)
    covered = sum(1 for c in programs for n in c.lines.values() if n)
    # Branches only of programs whose every run showed every direction: elsewhere a
    # direction not seen may have been taken (Cobertura has no "unknown").
    known = [c for c in programs if c.directions_complete]
    bvalid = sum(2 * len(c.branches) for c in known)
    bcovered = sum((t > 0) + (f > 0) for c in known for t, f in c.branches.values())
    root = ET.Element(
        "coverage",
        {
            "line-rate": _rate(covered, valid),
            "branch-rate": _rate(bcovered, bvalid) if bvalid else "0",
            "lines-covered": str(covered),
            "lines-valid": str(valid),
            "branches-covered": str(bcovered),
            "branches-valid": str(bvalid),
            "complexity": "0",
            "version": "pytest-lbr",
            "timestamp": str(int(time.time() * 1000)),
        },
    )
    ET.SubElement(ET.SubElement(root, "sources"), "source").text = cwd or os.getcwd()
    packages = ET.SubElement(root, "packages")
    for file, covs in _by_file(programs).items():
        lines_of = [c.file_lines(file) for c in covs]
        n = sum(len(x) for x in lines_of)
        hit = sum(1 for x in lines_of for c in x.values() if c)
        pkg = ET.SubElement(
            packages,
            "package",
            {"name": file, "line-rate": _rate(hit, n), "branch-rate": "0", "complexity": "0"},
        )
        classes = ET.SubElement(pkg, "classes")
        for cov, lines in zip(covs, lines_of, strict=True):
            done = sum(1 for c in lines.values() if c)
            cls = ET.SubElement(
                classes,
                "class",
                {
                    "name": cov.program,
                    "filename": file,
                    "line-rate": _rate(done, len(lines)),
                    "branch-rate": "0",
                    "complexity": "0",
                },
            )
            ET.SubElement(cls, "methods")
            xml_lines = ET.SubElement(cls, "lines")
            directions = _line_directions(cov, file) if cov.directions_complete else {}
            for ln, c in lines.items():
                attrs = {"number": str(ln), "hits": str(c)}
                if ln in directions:  # as coverage.py writes a line's branches
                    taken, total = directions[ln]
                    attrs["branch"] = "true"
                    attrs["condition-coverage"] = f"{100 * taken // total}% ({taken}/{total})"
                ET.SubElement(xml_lines, "line", attrs)
    ET.indent(root)
    return '<?xml version="1.0" ?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _line_directions(cov: ProgramCoverage, file: str) -> dict[int, tuple[int, int]]:
    """Line -> (directions taken, directions) of its conditional jumps."""
    out: dict[int, tuple[int, int]] = {}
    for ((f, ln), _), (taken, fell) in cov.branches.items():
        if f == file:
            seen, total = out.get(ln, (0, 0))
            out[ln] = (seen + (taken > 0) + (fell > 0), total + 2)
    return out


#: A report's programs by test name (LCOV's `TN:`; "" for one unnamed set).
ByTest = Mapping[str, Sequence[ProgramCoverage]]


def _lcov_report(by_test: ByTest, cwd: str | None) -> str:
    """LCOV record sets that genhtml and `lcov -a` sum: for each set of `by_test`
    (a kernel's, under `pytest-lbr vm`) whose programs know their tests, one
    with every program's code and no run, then one per pytest test with the
    programs it ran (test name: the set's, then the test's node id); else one
    with everything."""
    out = []
    for name, programs in by_test.items():
        tests = sorted({t for p in programs for t in p.contexts})
        if tests in ([], [""]):  # no run, or none in a test (a library's use)
            out.append(lcov(programs, cwd, test=name))
            continue
        out.append(lcov([p.without_runs() for p in programs], cwd, test=name))
        for test in tests:
            ran = [p.for_test(test) for p in programs if test in p.contexts]
            out.append(lcov(ran, cwd, test="_".join(n for n in (name, test) if n)))
    return "".join(out)


def _cobertura_report(by_test: ByTest, cwd: str | None) -> str:
    """Cobertura has no test names: the sets are summed into one."""
    sets = list(by_test.values())
    if len(sets) == 1:
        return cobertura(sets[0], cwd)
    merged = CoverageBook.from_records(p.to_record() for programs in sets for p in programs)
    return cobertura(merged.sorted(), cwd)


#: The writer of each `--lbr-cov-report` format: every `CoverageFormat` has one (a test
#: checks), so a new format is a name there and a writer here, never a silent default.
REPORT_WRITERS: dict[CoverageFormat, Callable[[ByTest, str | None], str]] = {
    CoverageFormat.LCOV: _lcov_report,
    CoverageFormat.COBERTURA: _cobertura_report,
}


def report_text(fmt: CoverageFormat, by_test: ByTest, cwd: str | None = None) -> str:
    """The text of a `fmt` report of `by_test` (programs by test name), paths made
    absolute against `cwd` (default: the working directory)."""
    return REPORT_WRITERS[fmt](by_test, cwd)
