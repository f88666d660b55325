"""Licences: the texts ship in the wheel and the sdist, and every BPF source says
the same licence in its SPDX line as it declares to the kernel.

The Python code is Apache-2.0 (LICENSE). The BPF programs are dual-licensed as
libbpf and libbpf-bootstrap are, `(LGPL-2.1 OR BSD-2-Clause)`, and declare
"Dual BSD/GPL" to the kernel, which counts it as GPL-compatible (kernel/bpf
license_is_gpl_compatible), so GPL-only helpers stay available. The texts are
in LICENSES/.

The wheel and sdist are the ones `ci/setup` leaves in dist/; without them
(a bare checkout) they are built here once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

ROOT = Path(__file__).resolve().parents[1]

#: The licence texts every distribution carries, by path in the source tree.
TEXTS = ("LICENSE", "LICENSES/Apache-2.0.txt", "LICENSES/LGPL-2.1.txt", "LICENSES/BSD-2-Clause.txt")

#: The BPF sources' licence, and the string their SEC("license") gives the kernel
#: for it (the kernel's name for a BSD/GPL dual licence).
BPF_SPDX = "(LGPL-2.1 OR BSD-2-Clause)"
BPF_KERNEL_LICENCE = "Dual BSD/GPL"

#: Where BPF C lives: the package's programs, the tests' and the examples'.
BPF_DIRS = ("bpf", "tests/bpf", "examples")

_SPDX_RE = re.compile(r"^(?://|/\*) SPDX-License-Identifier: (.+?)(?: \*/)?$")
_SEC_RE = re.compile(r'^char LICENSE\[\] SEC\("license"\) = "([^"]*)";$', re.M)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist): dist/'s from ci/setup, else built here."""
    folder = ROOT / "dist"
    wheels, sdists = sorted(folder.glob("pytest_lbr-*.whl")), sorted(folder.glob("*.tar.gz"))
    if not (wheels and sdists):
        folder = tmp_path_factory.mktemp("dist")
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(folder), str(ROOT)],
            check=True,
            capture_output=True,
        )
        wheels, sdists = sorted(folder.glob("*.whl")), sorted(folder.glob("*.tar.gz"))
    return wheels[-1], sdists[-1]


def test_the_wheel_carries_the_licence_texts(dist: tuple[Path, Path]) -> None:
    wheel, _ = dist
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        folder = info.rsplit("/", 1)[0] + "/licenses/"
        for text in TEXTS:
            assert whl.read(folder + text) == (ROOT / text).read_bytes(), text
        metadata = whl.read(info).decode()
    assert f"License-Expression: Apache-2.0 AND {BPF_SPDX}\n" in metadata
    assert all(f"License-File: {text}\n" in metadata for text in TEXTS), metadata


def test_the_sdist_carries_the_licence_texts(dist: tuple[Path, Path]) -> None:
    _, sdist = dist
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        for text in TEXTS:
            member = tar.extractfile(f"{top}/{text}")
            assert member is not None and member.read() == (ROOT / text).read_bytes(), text
        source = tar.extractfile(f"{top}/bpf/lbr_tracer.bpf.c")
        assert source is not None
        assert source.readline().decode().strip() == f"// SPDX-License-Identifier: {BPF_SPDX}"


def test_the_wheels_bpf_objects_declare_the_dual_licence(dist: tuple[Path, Path]) -> None:
    wheel, _ = dist
    with zipfile.ZipFile(wheel) as whl:
        objects = [n for n in whl.namelist() if n.endswith(".bpf.o")]
        assert objects, "no BPF objects in the wheel"
        for name in objects:
            section = ELFFile(BytesIO(whl.read(name))).get_section_by_name("license")
            assert section is not None, name
            assert section.data().rstrip(b"\0").decode() == BPF_KERNEL_LICENCE, name


def bpf_sources() -> list[Path]:
    """Every BPF C file of the tree: *.bpf.c and the headers beside them."""
    out: list[Path] = []
    for top in BPF_DIRS:
        for program in sorted((ROOT / top).rglob("*.bpf.c")):
            if "build" not in program.relative_to(ROOT).parts:
                out.append(program)
                out += sorted(program.parent.glob("*.h"))
    return sorted(set(out))


def test_every_bpf_source_spdx_line_agrees_with_its_kernel_licence() -> None:
    sources = bpf_sources()
    assert any(p.name == "lbr_tracer.bpf.c" for p in sources)
    wrong = []
    for path in sources:
        text = path.read_text()
        spdx = _SPDX_RE.match(text.splitlines()[0])
        declared = _SEC_RE.findall(text)
        name = path.relative_to(ROOT)
        if spdx is None:
            wrong.append(f"{name}: no SPDX-License-Identifier on its first line")
        elif spdx[1] != BPF_SPDX:
            wrong.append(f"{name}: SPDX {spdx[1]!r}, the BPF sources are {BPF_SPDX!r}")
        elif path.name.endswith(".bpf.c") and declared != [BPF_KERNEL_LICENCE]:
            wrong.append(
                f'{name}: SPDX {spdx[1]!r} but SEC("license") {declared!r}; '
                f"expected [{BPF_KERNEL_LICENCE!r}]"
            )
        elif path.suffix == ".h" and declared:
            wrong.append(f'{name}: a header declares SEC("license")')
    assert not wrong, "\n".join(wrong)
