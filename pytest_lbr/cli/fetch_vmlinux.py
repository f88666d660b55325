"""`pytest-lbr fetch-vmlinux`: Debian's debug vmlinux of a kernel, downloaded into the cache.

Set-up, not library code: it runs apt-get, so only the command (and tests that
need a real debug vmlinux) call it; the symbolizer just finds what it left
(`pytest_lbr.symbols.vmlinux.candidate_paths` looks in the cache last).
Of the ~900 MB package only ./usr/lib/debug/boot/vmlinux-RELEASE is kept,
read from the tar stream of `dpkg-deb --fsys-tarfile` (no shell, no tar).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TextIO

from pytest_lbr.exit_codes import EXIT_FAILED, EXIT_OK
from pytest_lbr.progress import progress
from pytest_lbr.symbols.cache import cache_dir
from pytest_lbr.symbols.vmlinux import VmlinuxError, fetched_path

__all__ = ["extract_vmlinux", "fetch_debian_dbg", "run_fetch_vmlinux"]


def fetch_debian_dbg(release: str, directory: Path | None = None) -> str:
    """The Debian debug vmlinux of `release` (e.g. "6.1.0-56-amd64"), downloaded once.

    `apt-get download linux-image-RELEASE-dbg` into `directory` (default: the
    cache's dbg/), keep only the vmlinux, delete the package. Raises
    VmlinuxError saying why if apt cannot fetch it (OSError without apt-get).
    """
    base = directory or cache_dir() / "dbg"
    target = fetched_path(release, base)
    if target.exists():
        return str(target)
    base.mkdir(parents=True, exist_ok=True)
    pkg = f"linux-image-{release}-dbg"
    apt = ["apt-get", "-q", *_foreign_arch_options(release)]
    want = pkg
    if len(apt) > 2:
        # Another architecture's kernel (an arm64 guest's, fetched on an x86-64 host):
        # apt must know that architecture's package list for this one call. The
        # options change no apt configuration.
        want = f"{pkg}:{release.rsplit('-', 1)[-1]}"
        progress(f"apt-get update for {want}")
        subprocess.run([*apt, "update"], capture_output=True, text=True)
    progress(f"downloading {pkg} (~900 MB) into {base}")
    res = subprocess.run([*apt, "download", want], cwd=base, capture_output=True, text=True)
    debs = sorted(base.glob(f"{pkg}_*.deb"))
    if res.returncode != 0 or not debs:
        msg = (res.stderr.strip().splitlines() or ["no .deb"])[-1]
        raise VmlinuxError(f"apt-get download {want} failed: {msg}")
    progress(f"extracting vmlinux-{release} from {debs[-1].name}")
    extract_vmlinux(debs[-1], release, target)
    for deb in debs:
        deb.unlink()
    return str(target)


#: Debian's kernel flavours named by their architecture (linux-image-6.1.0-50-arm64).
_FLAVOUR_ARCHES = ("amd64", "arm64")


def _foreign_arch_options(release: str) -> list[str]:
    """apt options that make `release`'s architecture known, when it is not this host's."""
    arch = release.rsplit("-", 1)[-1]
    if arch not in _FLAVOUR_ARCHES:
        return []
    host = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    native = host.stdout.strip()
    if host.returncode != 0 or not native or native == arch:
        return []
    return ["-o", f"APT::Architectures::={native}", "-o", f"APT::Architectures::={arch}"]


def extract_vmlinux(deb: Path, release: str, target: Path) -> None:
    """Copy ./usr/lib/debug/boot/vmlinux-RELEASE out of the package `deb` to `target`.

    Atomic: a concurrent reader (another session's symbolizer) never sees half
    a file. Raises VmlinuxError naming the package when it has no such file or
    dpkg-deb cannot read it.
    """
    member = f"usr/lib/debug/boot/vmlinux-{release}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    problem = ""
    found = False
    with tempfile.TemporaryFile() as errors:
        # stderr in a file, not a pipe: nobody reads it while the tar streams.
        reader = subprocess.Popen(
            ["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE, stderr=errors
        )
        assert reader.stdout is not None
        try:
            with tarfile.open(fileobj=reader.stdout, mode="r|") as tar:
                for info in tar:
                    if info.isfile() and info.name.removeprefix("./") == member:
                        source = tar.extractfile(info)
                        assert source is not None  # a regular file has contents
                        with open(partial, "wb") as out:
                            shutil.copyfileobj(source, out, 1 << 20)
                        found = True
                        break  # the rest of the package is not needed
        except tarfile.TarError as exc:  # a damaged package; a full disk stays an OSError
            problem = str(exc)
        finally:
            reader.stdout.close()  # dpkg-deb, cut short, stops on EPIPE
            status = reader.wait()
        errors.seek(0)
        said = errors.read().decode(errors="replace").strip()
    try:
        if not found:
            if status != 0 or problem:
                raise VmlinuxError(f"cannot read {deb}: {said or problem or f'exit {status}'}")
            raise VmlinuxError(f"{deb} has no ./{member}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def run_fetch_vmlinux(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`pytest-lbr fetch-vmlinux [RELEASE]`: its path alone on stdout."""
    release = args.release or os.uname().release
    try:
        path = fetch_debian_dbg(release)
    except (VmlinuxError, OSError) as exc:
        print(f"pytest-lbr: cannot fetch the debug vmlinux of {release}: {exc}", file=err)
        return EXIT_FAILED
    print(path, file=out)  # alone on stdout: --lbr-vmlinux=$(pytest-lbr fetch-vmlinux)
    return EXIT_OK
