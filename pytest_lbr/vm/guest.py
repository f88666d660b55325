"""Inside the guest (`python -m pytest_lbr.vm guest ...`, started by vng --exec).

Mounts bpffs/tracefs/debugfs, runs pytest (JUnit XML, the trace report) or the
command with the environment the host passed, saves dmesg and writes the exit
status into the results directory, where the host side waits for it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_lbr.guest_mode import ENV_GUEST, ENV_RESULTS, ENV_STRICT, RESULTS_FILE
from pytest_lbr.vm.env import read_guest_env
from pytest_lbr.vm.run import STARTED, STATUS

__all__ = ["guest_cli", "guest_main"]


def _mount(fstype: str, target: str) -> None:
    if os.path.ismount(target):
        return
    os.makedirs(target, exist_ok=True)
    subprocess.run(["mount", "-t", fstype, fstype, target], check=False)


def guest_main(
    results: Path,
    args: list[str],
    *,
    execute: str | None = None,
    strict: bool = True,
    cache: Path | None = None,
    binds: Sequence[tuple[Path, Path]] = (),
) -> int:
    """Inside the VM: mount, run pytest (or the command), save dmesg, write the status file.

    `cache`: the host's pytest-lbr cache directory (writable here, in guest RAM).
    `binds`: (mounted at, belongs at) of writable directories mounted aside.
    """
    from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS, TracefsError, find_tracefs, mount_tracefs

    for source, target in binds:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=False)
    (results / STARTED).write_text(f"{platform.release()}\n")
    _mount("bpf", "/sys/fs/bpf")
    # The graph backend only looks tracefs up: mounting it is this set-up's job
    # (at the usual place, where tests/kernel looks too).
    if find_tracefs() != Path(TRACEFS_MOUNTS[0]):
        try:
            where = f"mounted tracefs at {mount_tracefs()}"
        except TracefsError as exc:
            where = exc.strerror or str(exc)  # tests that need it then skip saying why
        print(f"[guest {platform.release()}] {where}", flush=True)
    _mount("debugfs", "/sys/kernel/debug")
    # The guest's own scratch space: the host's /tmp shared over 9p breaks pytest's
    # unlinked temporary files (capture), so tmp_path and TMPDIR live in guest RAM.
    tmpdir = Path("/run/pytest-lbr-tmp")
    tmpdir.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(tmpdir):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1G", "tmpfs", str(tmpdir)], check=False)
    env = dict(os.environ)
    env.update(read_guest_env(results))  # the host's PYTEST_* and --env; the rest wins
    env.update(
        # The venv's scripts (pytest-lbr, pytest) first, as where `pytest-lbr vm` ran.
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}",
        TMPDIR=str(tmpdir),
        # Bytecode, and pytest's assertion-rewritten plugin modules (all of pytest-lbr's
        # and hypothesis's), cached in guest RAM rather than never: every pytest a test
        # starts would otherwise rewrite ~80 modules again.
        PYTHONPYCACHEPREFIX=str(tmpdir / "pycache"),
        **{ENV_GUEST: "1", ENV_STRICT: "1" if strict else "0", ENV_RESULTS: str(results)},
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache.parent)  # the same cache whatever $HOME is here
    if execute is not None:
        cmd = ["sh", "-c", execute]
    else:
        # -P: like the `pytest` command, not `python -m pytest`, the working directory is
        # not put on sys.path (a checkout of the plugin must not shadow the installed one).
        cmd = [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider"]
        cmd.append(f"--junitxml={results / 'junit.xml'}")
        if not any(a == "--lbr-results" or a.startswith("--lbr-results=") for a in args):
            # The runner's tally, summary.md and bisect verdicts read it.
            cmd.append(f"--lbr-results={results / RESULTS_FILE}")
        if not any(a == "--lbr-report" or a.startswith("--lbr-report=") for a in args):
            cmd.append(f"--lbr-report={results / 'report'}")
        cmd += args
    print(f"[guest {platform.release()}] {shlex.join(cmd)}", flush=True)
    status = subprocess.run(cmd, env=env, check=False).returncode
    dmesg = subprocess.run(["dmesg"], capture_output=True, check=False)
    (results / "dmesg.txt").write_bytes(dmesg.stdout)
    (results / STATUS).write_text(f"{status}\n")
    return status


def guest_cli(argv: list[str]) -> int:
    """`python -m pytest_lbr.vm guest ARGS` (what `build_command` puts in vng --exec)."""
    parser = argparse.ArgumentParser(prog="python -m pytest_lbr.vm guest")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--exec", dest="execute")
    parser.add_argument("--no-strict", dest="strict", action="store_false")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--bind", action="append", default=[], metavar="MOUNTED:TARGET")
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    binds = [(Path(a), Path(b)) for a, _, b in (x.partition(":") for x in args.bind)]
    return guest_main(
        args.results,
        args.args,
        execute=args.execute,
        strict=args.strict,
        cache=args.cache,
        binds=binds,
    )
