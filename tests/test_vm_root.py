"""`pytest-lbr vm --arch arm64 --root DIR` from the host: the vng command it plans,
and one clear line for each thing missing. The boot itself is in
tests/kernel/../docs (an arm64 guest takes a root built by ci/qemu/arm64-root)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_lbr.exit_codes import EXIT_NO_GUEST
from pytest_lbr.vm.root import GuestRoot, RootError, machine_name
from tests.commands import PYTEST_LBR

needs_qemu_arm = pytest.mark.skipif(
    shutil.which("qemu-system-aarch64") is None
    or not (shutil.which("vng") or Path(PYTEST_LBR).with_name("vng").exists()),
    reason="qemu-system-aarch64 not installed (apt-get install qemu-system-arm)",
)


def _root(tmp: Path, *, python: bool = True, kernels: tuple[str, ...] = ("6.1.0-50",)) -> Path:
    """The layout of a Debian arm64 root: what the runner looks up in one."""
    root = tmp / "root"
    (root / "boot").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "busybox").write_bytes(b"")
    for k in kernels:
        (root / "boot" / f"vmlinuz-{k}-arm64").write_bytes(b"")
    if python:
        (root / "opt" / "pytest-lbr" / "bin").mkdir(parents=True)
        (root / "opt" / "pytest-lbr" / "bin" / "python").symlink_to("/usr/bin/python3.11")
    return root


def _vm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTEST_LBR, "vm", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_arch_names() -> None:
    assert machine_name("arm64") == machine_name("aarch64") == "aarch64"
    assert machine_name("amd64") == machine_name("x86_64") == "x86_64"
    with pytest.raises(RootError, match=r"^--arch 'mips' is not one pytest-lbr boots: use one of"):
        machine_name("mips")


def test_kernels_in_the_root_newest_first_by_version(tmp_path: Path) -> None:
    root = GuestRoot.open(_root(tmp_path, kernels=("6.1.0-9", "6.1.0-50", "6.12.9+bpo")), "arm64")
    assert root.python() == "/opt/pytest-lbr/bin/python"  # a dangling link is still the path
    assert root.kernel("6.1").name == "vmlinuz-6.1.0-50-arm64"  # 50 > 9, not by text
    assert root.kernel(None).name == "vmlinuz-6.12.9+bpo-arm64"
    with pytest.raises(RootError, match=r"^no kernel 6.6 in .*apt-get install linux-image-arm64"):
        root.kernel("6.6")


@needs_qemu_arm
def test_dry_run_boots_the_roots_kernel_with_its_python(tmp_path: Path) -> None:
    root = _root(tmp_path)
    out = _vm("--arch", "arm64", "--root", str(root), "--dry-run", "--", "examples", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout)
    assert cmd[cmd.index("--run") + 1] == str(root / "boot" / "vmlinuz-6.1.0-50-arm64")
    assert cmd[cmd.index("--arch") + 1] == "arm64"  # vng's name (Debian's)
    assert cmd[cmd.index("--root") + 1] == str(root)
    assert cmd[cmd.index("--rodir") + 1] == f"{tmp_path}={tmp_path}"  # the tests, read-only
    assert "--disable-kvm" in cmd
    # vng mounts writable directories before the read-only working directory, which
    # would hide the results inside it: they go aside and the guest binds them back.
    results = tmp_path / "lbr-results" / "arm64-6.1"
    assert cmd[cmd.index("--rwdir") + 1] == f"/var/lib/pytest-lbr/rw0={results}"
    assert f"--bind /var/lib/pytest-lbr/rw0:{results}" in out.stdout
    elsewhere = tmp_path.parent / f"{tmp_path.name}-results"
    out = _vm(
        *("--arch", "arm64", "--root", str(root), "--results", str(elsewhere), "--dry-run"),
        cwd=tmp_path,
    )
    cmd = shlex.split(out.stdout)
    assert cmd[cmd.index("--rwdir") + 1] == f"{elsewhere / 'arm64-6.1'}={elsewhere / 'arm64-6.1'}"
    assert "--bind" not in out.stdout
    assert "/opt/pytest-lbr/bin/python -m pytest_lbr.vm guest" in out.stdout
    assert not (root / tmp_path.relative_to("/")).exists()  # a dry run makes no mount point


@needs_qemu_arm
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arch", "arm64"], "--arch arm64 needs --root DIR: a root file system of that"),
        (["--arch", "arm64", "--root", "ROOT", "--kernel", "6.6"], "no kernel 6.6 in "),
        (["--arch", "arm64", "--root", "NOPY"], "has no Python (opt/pytest-lbr/bin/python, "),
        (["--arch", "arm64", "--root", "ROOT", "--kvm"], "--kvm: KVM runs only x86_64 guests"),
        (["--arch", "sparc", "--root", "ROOT"], "--arch 'sparc' is not one pytest-lbr boots"),
        (["--arch", "arm64", "--root", "MISSING"], "no such directory"),
    ],
)
def test_what_is_missing_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    root = _root(tmp_path)
    nopy = _root(tmp_path / "nopy", python=False)
    where = {"ROOT": str(root), "NOPY": str(nopy), "MISSING": str(tmp_path / "missing")}
    out = _vm(*[where.get(a, a) for a in args], "--dry-run", cwd=tmp_path)
    assert out.returncode == EXIT_NO_GUEST, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[vm] error: "), out.stderr
    assert message in lines[0]
