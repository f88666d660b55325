"""A guest's own root file system, for `pytest-lbr vm --arch arm64 --root DIR`.

The x86-64 guests share the host's root file system (and so its venv). A guest of
another architecture cannot run the host's programs, so it boots a root file system
of its own architecture, handed to virtme-ng with `--arch A --root DIR`; that root
holds Python with pytest-lbr installed, and the kernels to boot under `boot/`
(ci/qemu/arm64-root in pytest-lbr's repository builds an arm64 Debian one).
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GUEST_PYTHONS",
    "GuestRoot",
    "RootError",
    "is_release",
    "machine_name",
    "pinned_missing",
]

#: `--arch` spellings -> the machine name `uname -m` prints in such a guest.
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
#: Where in a root the guest's Python is looked for, first found wins: the venv
#: ci/qemu/arm64-root makes, then a system-wide install.
GUEST_PYTHONS = ("opt/pytest-lbr/bin/python", "usr/local/bin/python3", "usr/bin/python3")
#: Each machine's name in Debian (its linux-image-* flavour) and in vng's --arch.
_DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


#: An exact kernel release, as `uname -r` prints it and Debian names its package
#: (`linux-image-<release>`): 6.1.0-56-amd64, 6.12.117+deb12-amd64.
_RELEASE = re.compile(r"\d+\.\d+[.-][0-9A-Za-z.+~_-]*")


def is_release(spec: str) -> bool:
    """Is a --kernel value an exact kernel release (a pin), not a series or a path?
    A file so named is given as ./NAME."""
    return "/" not in spec and _RELEASE.fullmatch(spec) is not None


def pinned_missing(release: str, boot: Path, how: str) -> str:
    """The one-line error for a pinned release with no `boot/vmlinuz-<release>`: how to
    install its package (`how` runs apt-get there), or the pins that would work."""
    have = sorted(p.name.removeprefix("vmlinuz-") for p in boot.glob("vmlinuz-*"))
    return (
        f"pinned kernel {release} is not installed (no {boot}/vmlinuz-{release}): "
        f"{how}apt-get install linux-image-{release} (gone from Debian's archive: install "
        "the .deb your CI cached, or fetch it from snapshot.debian.org), or pin one "
        f"installed: {', '.join(have) or 'none'}"
    )


class RootError(ValueError):
    """A `--arch`/`--root` the runner cannot boot; the message says what to do."""


def machine_name(arch: str | None) -> str:
    """`uname -m` of a guest of `arch` (None: the host's own)."""
    if arch is None:
        return platform.machine()
    try:
        return _MACHINES[arch.lower()]
    except KeyError:
        raise RootError(
            f"--arch {arch!r} is not one pytest-lbr boots: use one of {', '.join(_MACHINES)}"
        ) from None


@dataclass(frozen=True)
class GuestRoot:
    """A root file system for guests of `machine` (`uname -m` form)."""

    path: Path
    machine: str

    @classmethod
    def open(cls, path: Path, arch: str | None) -> GuestRoot:
        """Check `path` is a root file system a guest can run pytest-lbr from."""
        machine = machine_name(arch)
        root = path.resolve()
        if not root.is_dir():
            raise RootError(f"--root {path}: no such directory")
        made = cls(root, machine)
        made.python()  # raises when there is none
        return made

    @property
    def debian_arch(self) -> str:
        """The architecture's Debian name (`arm64`), which vng's --arch takes too."""
        return _DEBIAN_ARCH.get(self.machine, self.machine)

    def python(self) -> str:
        """The guest's Python, as a path inside the guest."""
        for rel in GUEST_PYTHONS:
            if (self.path / rel).exists() or (self.path / rel).is_symlink():
                return "/" + rel
        raise RootError(
            f"--root {self.path} has no Python ({', '.join(GUEST_PYTHONS)}): install python3 "
            "and pytest-lbr there (ci/qemu/arm64-root in pytest-lbr's repository builds one)"
        )

    def kernel(self, spec: str | None) -> Path:
        """The image to boot: '6.1' -> the newest `boot/vmlinuz-6.1.*` in the root,
        None -> the newest of all there, a release (6.1.0-56-arm64) -> exactly that one
        of the root, anything else -> that file."""
        if spec is not None and is_release(spec):
            image = self.path / "boot" / f"vmlinuz-{spec}"
            if not image.is_file():
                raise RootError(pinned_missing(spec, image.parent, f"chroot {self.path} "))
            return image
        if spec is not None and not _is_series(spec):
            image = Path(spec)
            if not image.is_file():
                raise RootError(f"kernel image {spec!r} does not exist")
            return image.resolve()
        pattern = f"vmlinuz-{spec}.*" if spec else "vmlinuz-*"
        found = sorted((self.path / "boot").glob(pattern), key=_version_key)
        if not found:
            flavour = self.debian_arch
            raise RootError(
                f"no kernel {spec or ''} in {self.path / 'boot'} ({pattern}): install one in "
                f"the root (Debian: chroot {self.path} apt-get install linux-image-{flavour}) "
                "or pass --kernel PATH"
            )
        return found[-1]


def _is_series(spec: str) -> bool:
    parts = spec.split(".")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


def _version_key(path: Path) -> list[int]:
    digits = "".join(c if c.isdigit() else " " for c in path.name)
    return [int(x) for x in digits.split()]
