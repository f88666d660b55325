"""Where golden files live, what they are named, and how they are written.

A golden file lives beside the test module::

    tests/__lbr_golden__/test_net/test_connect.lbr                 default
    tests/__lbr_golden__/test_net/test_connect@6.12.lbr            wins on 6.12.x kernels
    tests/__lbr_golden__/test_net/test_connect@aarch64.lbr         wins on arm64
    tests/__lbr_golden__/test_net/test_connect@aarch64-6.12.lbr    on arm64 6.12.x

A file counts only for the architecture it was recorded on (its header says):
one suite keeps one set of files per architecture, the first recorded without
the architecture in its name.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "GOLDEN_DIR",
    "display_path",
    "golden_dir",
    "golden_name",
    "golden_candidates",
    "golden_path",
    "kernel_series",
    "safe_file_name",
    "unused_files",
    "write_atomic",
]

#: Directory beside the test module that holds golden traces.
GOLDEN_DIR = "__lbr_golden__"
_SUFFIX = ".lbr"
#: Everything a file name made from a node id may not contain. Not `/` (it is one file),
#: not `@` (it separates a test's name from the kernel series of a variant, so a name
#: never contains one), not `:` (Windows, and `::` reads as a node id).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]]")


def safe_file_name(text: str) -> str:
    """`text` with every character outside ``A-Za-z0-9_.,=+-[]`` replaced by `_`.

    The one rule for file names made from test names: golden files, and the
    `--lbr-report` files of each test.
    """
    return _UNSAFE.sub("_", text)


def kernel_series(release: str) -> str:
    """`6.12.117+deb12-amd64` -> `6.12` (the part a series variant is named by)."""
    m = re.match(r"^(\d+\.\d+)", release)
    return m.group(1) if m else release


def golden_dir(module_path: Path) -> Path:
    """The directory of a test module's golden files: `__lbr_golden__/<module>/` beside it."""
    return module_path.parent / GOLDEN_DIR / module_path.stem


def golden_path(module_path: Path, test_name: str, release: str) -> tuple[Path, Path]:
    """(path to read, default path) for a test; the series variant wins if it exists."""
    name = safe_file_name(test_name)
    folder = golden_dir(module_path)
    default = folder / f"{name}{_SUFFIX}"
    variant = folder / f"{name}@{kernel_series(release)}{_SUFFIX}"
    return (variant if variant.exists() else default), default


def golden_candidates(
    module_path: Path, test_name: str, release: str, arch: str
) -> tuple[list[Path], Path]:
    """(files that may hold the test's golden trace, most specific first; the file
    to record for `arch` when none of them was recorded there).

    The caller reads each existing candidate's architecture: one of another
    architecture does not count, and then the recording goes to `name@ARCH.lbr`
    rather than over it.
    """
    name = safe_file_name(test_name)
    folder = golden_dir(module_path)
    series = kernel_series(release)
    arch = safe_file_name(arch)
    names = [f"{name}@{arch}-{series}", f"{name}@{arch}", f"{name}@{series}", name]
    return [folder / f"{n}{_SUFFIX}" for n in names], folder / f"{name}@{arch}{_SUFFIX}"


def golden_name(path: Path) -> str:
    """The test name a golden file belongs to: `t.lbr` and `t@6.12.lbr` -> `t`."""
    return path.name.removesuffix(_SUFFIX).partition("@")[0]


def unused_files(module_path: Path, used: Iterable[str]) -> list[Path]:
    """The module's golden files (variants included) whose test name is not in `used`."""
    folder = golden_dir(module_path)
    if not folder.is_dir():
        return []
    names = set(used)
    return sorted(
        path
        for path in folder.glob(f"*{_SUFFIX}")
        # write_atomic's temporary files start with a dot; they are nobody's golden.
        if not path.name.startswith(".") and golden_name(path) not in names
    )


def display_path(path: Path) -> str:
    """`path` as messages show it: relative to the working directory where possible."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def write_atomic(path: Path, text: str) -> None:
    """Write `path` via a temporary file and rename: readers (and xdist workers) never
    see half a file; mode 0644 whatever the umask, directories 0755."""
    for parent in reversed([path.parent, *path.parent.parents]):
        if not parent.exists():
            try:
                parent.mkdir()
            except FileExistsError:  # another xdist worker made it first
                continue
            parent.chmod(0o755)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
