"""The selftest's own BPF program: `bpf/lbr_selftest.bpf.c`, built by clang into the wheel.

The wheel carries `pytest_lbr/objects/lbr_selftest.bpf.o` beside the tracer
objects (built by `make -C bpf` when the wheel is built; BPF bytecode with BTF
and line info, one object for every architecture). It is an XDP program that
calls two helpers the function tracer can see (`bpf_csum_diff`, then
`bpf_xdp_adjust_head`), so both backends have calls from the program to record,
and the JIT addresses of those calls have known lines of its source to
symbolize to. It loads through libbpf (`pytest_lbr.bpf`) and runs with
BPF_PROG_TEST_RUN.
"""

from __future__ import annotations

import errno
from importlib import resources
from pathlib import Path

from pytest_lbr.bpf import BpfObject, RunResult
from pytest_lbr.kernel.machine import machine
from pytest_lbr.programs.info import Btf, program_details
from pytest_lbr.programs.lines import jited_image
from pytest_lbr.selftest.verdicts import CallSite
from pytest_lbr.symbols import Symbolizer
from pytest_lbr.symbols.disasm import call_targets, disassemble

__all__ = [
    "CALLEES",
    "FILE",
    "NAME",
    "SelftestProgram",
    "call_sites",
    "load_program",
    "program_object",
]

#: The program's name (its function in the source, and its bpf_prog_info name).
NAME = "lbr_selftest"
#: Its source file, as its BTF line info names it (a path ending in this).
FILE = "lbr_selftest.bpf.c"
#: The helpers the program calls, in the order of their lines.
CALLEES = ("bpf_csum_diff", "bpf_xdp_adjust_head")


def program_object() -> Path:
    """Path of the packaged test program object.

    Raises FileNotFoundError naming the file when this install has none (a
    source tree where `make -C bpf` has not run).
    """
    path = Path(str(resources.files("pytest_lbr").joinpath("objects", "lbr_selftest.bpf.o")))
    if not path.is_file():
        raise FileNotFoundError(
            errno.ENOENT,
            "selftest program object not in this install (reinstall pytest-lbr; "
            "in a source tree run: make -C bpf)",
            str(path),
        )
    return path


class SelftestProgram:
    """The loaded program: a tracing target (it has `.fd`), runnable, closed by `close()`."""

    def __init__(self, path: Path | None = None) -> None:
        self._object = BpfObject(path or program_object())
        self._program = self._object.programs[NAME]
        self.name = NAME

    @property
    def fd(self) -> int:
        """The program's fd, owned by its object (do not close it)."""
        return self._program.fd

    def run(self, packet: bytes = bytes(64)) -> RunResult:
        """Run the program once on `packet` with BPF_PROG_TEST_RUN."""
        return self._program.run(packet)

    def close(self) -> None:
        """Unload the program (idempotent)."""
        self._object.close()

    def __enter__(self) -> SelftestProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_program() -> SelftestProgram:
    """Load the selftest program (root: loading BPF needs CAP_BPF/CAP_SYS_ADMIN).

    Raises OSError: FileNotFoundError when the object is missing, `BpfLoadError`
    (with the verifier log) when the kernel refuses it.
    """
    return SelftestProgram()


def call_sites(fd: int, symbolizer: Symbolizer) -> list[CallSite]:
    """Every call in the JIT image of the program behind `fd`, in address order: the
    call instruction symbolized as any traced address is, its target named, and the
    source text the program's BTF line info keeps for that line (when it keeps one)."""
    start, code = jited_image(fd)
    arch = machine().name
    calls = call_targets(disassemble(code, start, arch), arch)
    located = symbolizer.locate_many([a for call in calls for a in call])
    details = program_details(fd, lines=True)
    texts: dict[tuple[str, int], str] = {}
    with Btf(details.btf_id) as btf:
        for li, _ in details.lines:
            file, text = btf.string(li.file_name_off), btf.string(li.line_off)
            if file and text:
                texts[(Path(file).name, li.line_col >> 10)] = text
    sites = []
    for addr, target in calls:
        loc = located[addr]
        key = (Path(loc.file).name, loc.line) if loc.file and loc.line else None
        sites.append(CallSite(loc, located[target].symbol, texts.get(key) if key else None))
    return sites
