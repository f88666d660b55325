"""`pytest-lbr selftest`: the LBR-host validation kit's command (the kit: `pytest_lbr.selftest`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TextIO

from pytest_lbr.cli.doctor import doctor_checks
from pytest_lbr.cli.status import UsageError
from pytest_lbr.exit_codes import EXIT_FAILED, EXIT_OK

__all__ = ["run_selftest"]


def run_selftest(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`pytest-lbr selftest`: the live run and its bundle, or `--compare` of two reports."""
    from pytest_lbr import selftest

    if args.compare:
        from pytest_lbr.selftest.compare import ReportError, compare_reports

        try:
            results = compare_reports(Path(args.compare[0]), Path(args.compare[1]))
        except ReportError as exc:
            raise UsageError(str(exc)) from None
        for r in results:
            print(r, file=out)
        return EXIT_FAILED if any(r.status == selftest.FAIL for r in results) else EXIT_OK
    print(f"pytest-lbr selftest: kernel {os.uname().release} {os.uname().machine}", file=out)
    bundle = selftest.run_selftest(
        args.vmlinux,
        doctor=lambda: doctor_checks(args.vmlinux),
        progress=lambda line: print(line, file=out, flush=True),
    )
    try:
        paths = selftest.write_bundle(bundle, Path(args.out))
    except OSError as exc:
        print(
            f"pytest-lbr: cannot write the bundle to {args.out}: {exc.strerror} (pass --out DIR)",
            file=err,
        )
        return EXIT_FAILED
    print(bundle.text().splitlines()[-1], file=out)
    print(f"bundle: {paths[0]} {paths[1]} (attach both to an issue)", file=out)
    return EXIT_FAILED if bundle.failed else EXIT_OK
