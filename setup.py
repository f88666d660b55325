"""Builds the BPF objects (the LBR tracer, the selftest's program) into the package while
the wheel is built.

Everything else is declared in pyproject.toml. The objects are BPF bytecode
(architecture neutral), so the wheel stays `py3-none-any`; building needs clang
and libbpf's headers, installing and using the wheel needs neither.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithTracer(build_py):
    """build_py, then `make -C bpf` into the built package's objects/ directory."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            out = HERE / "pytest_lbr" / "objects"  # an editable install uses the source tree
        else:
            out = Path(self.build_lib).resolve() / "pytest_lbr" / "objects"
        missing = [tool for tool in ("make", "clang") if shutil.which(tool) is None]
        if missing:
            raise SystemExit(
                f"building pytest-lbr needs {' and '.join(missing)} to compile its BPF programs "
                "(apt-get install clang make libbpf-dev)"
            )
        subprocess.run(["make", "-s", "-C", str(HERE / "bpf"), f"PKG_DIR={out}"], check=True)


setup(cmdclass={"build_py": BuildPyWithTracer})
