"""Benchmark (host or guest): how fast the graph backend parses the function tracer's text.

`parse_trace` on real trace text: each file is parsed on its own (one trace, or
one live poll, each), as

* line by line -- the general path alone (`graph_text._parse_lines`: one regex
  match per line and per body, what parse_trace did for every line before the
  one-pass reader);
* one pass, cold -- `parse_trace` with its body cache emptied before each file
  (a first trace: every call site parsed once);
* one pass, warm -- `parse_trace` again (later traces and polls see the same
  call sites).

Records per second over all files, median of `--runs` interleaved runs (min-max).
The default input is tests/data/ftrace-*.txt; a bigger real trace is
`Trace.capture_text` written to a file (any graph trace: `GraphCapture.text`).

    python bench/parse.py [FILE...] [--runs 7] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, add_common_args, fmt_stat, save_json, timed_interleaved  # noqa: E402

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line of this benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, runs=7)
    ap.add_argument("files", nargs="*", type=Path, help="trace text (default: tests/data)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print a table and write its JSON."""
    from pytest_lbr.capture.graph import text as graph_text

    args = parse_args(argv)
    files = args.files or sorted((REPO / "tests" / "data").glob("ftrace-*.txt"))
    texts = [f.read_text(errors="replace") for f in files]

    def line_by_line() -> None:
        for text in texts:
            graph_text._parse_lines(text, [], {})

    def cold() -> None:
        for text in texts:
            graph_text._bodies.clear()
            graph_text.parse_trace(text)

    def warm() -> None:
        for text in texts:
            graph_text.parse_trace(text)

    methods: dict[str, Callable[[], None]] = {
        "line by line": line_by_line,
        "one pass, cold": cold,
        "one pass, warm": warm,
    }
    records = sum(len(graph_text.parse_trace(t)) for t in texts)
    times = timed_interleaved(methods, args.runs)
    rates = {name: [records / s for s in secs] for name, secs in times.items()}
    print(f"{len(files)} files, {sum(map(len, texts)) / 1e6:.1f} MB, {records:,} records")
    for name, r in rates.items():
        print(f"  {name:16} {fmt_stat(r, 0)} records/s")
    out: dict[str, Any] = {
        "benchmark": "parse",
        "files": [str(f) for f in files],
        "records": records,
        "records_per_s": rates,
    }
    if args.out:
        save_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
