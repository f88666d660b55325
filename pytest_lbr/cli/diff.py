"""`pytest-lbr diff A B`: two golden files compared with the plugin's own parser."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from pytest_lbr.cli.status import UsageError
from pytest_lbr.exit_codes import EXIT_FAILED, EXIT_OK

__all__ = ["run_diff"]


def run_diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`pytest-lbr diff A B`: 0 identical, 1 they differ (the diff printed)."""
    from pytest_lbr.golden import Comparison, GoldenError, parse

    files = []
    for name in (args.a, args.b):
        path = Path(name)
        try:
            files.append(parse(path.read_text(encoding="utf-8"), path))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
        except GoldenError as exc:
            raise UsageError(str(exc)) from None
    a, b = files
    for key in ("kernel", "backend", "level", "arch"):
        if a.header.get(key) != b.header.get(key):
            print(f"# {key}: {a.header.get(key)} -> {b.header.get(key)}", file=out)
    if a.level != b.level:
        raise UsageError(
            f"{args.a} is at level {a.level!r}, {args.b} at {b.level!r}: not comparable"
        )
    cmp = Comparison(a.lines, b.lines, Path(args.a))
    if cmp.matches:
        print(f"identical: {len(a.lines)} edge line(s)", file=out)
        return EXIT_OK
    text = cmp.diff(max_lines=args.max_lines)
    # Comparison names its sides for the test-run case; here both are files.
    text = text.replace(f"--- golden {Path(args.a).name}", f"--- {args.a}", 1)
    text = text.replace("+++ this run", f"+++ {args.b}", 1)
    print(text, file=out)
    print(cmp.first_divergence(), file=out)
    return EXIT_FAILED
