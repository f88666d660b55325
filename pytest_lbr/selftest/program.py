"""The selftest's own BPF program, assembled here with its BTF line table.

The selftest ships in the wheel and must not need clang or a source tree, so its
test program is a handful of BPF instructions written out below, loaded with a
BTF blob that gives each instruction a source line (the `SOURCE` text). It is an
XDP program that calls two helpers the function tracer can see
(`bpf_csum_diff`, `bpf_xdp_adjust_head`), so both backends have calls from the
program to record, and its JIT addresses have known lines to symbolize to.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import weakref
from dataclasses import dataclass

from pytest_lbr.libbpf import bpf_test_run_opts, check_int, lib

__all__ = ["FILE", "NAME", "SOURCE", "CALLEES", "SelftestProgram", "load_program"]

#: The program's name (its BTF function name and bpf_prog_info name).
NAME = "lbr_selftest"
#: The file name its line records carry.
FILE = "lbr_selftest.bpf.c"
#: The C the instructions below were written from: the lines the JIT addresses must map to.
SOURCE = """\
int lbr_selftest(struct xdp_md *ctx)
{
	bpf_csum_diff(0, 0, 0, 0, 0);
	bpf_xdp_adjust_head(ctx, 0);
	return XDP_PASS;
}
"""
#: The helpers the program calls, in order.
CALLEES = ("bpf_csum_diff", "bpf_xdp_adjust_head")

_BPF_FUNC_csum_diff, _BPF_FUNC_xdp_adjust_head = 28, 44  # uapi enum bpf_func_id
_XDP_PASS = 2


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, src << 4 | dst, off, imm)


_MOV64_REG, _MOV64_IMM, _CALL, _EXIT = 0xBF, 0xB7, 0x85, 0x95

#: (source line, instructions): each group starts a line record.
_LINES: tuple[tuple[int, tuple[bytes, ...]], ...] = (
    (1, (_insn(_MOV64_REG, 6, 1),)),  # keep ctx in r6 across the calls
    (3, (*(_insn(_MOV64_IMM, r) for r in range(1, 6)), _insn(_CALL, imm=_BPF_FUNC_csum_diff))),
    (
        4,
        (
            _insn(_MOV64_REG, 1, 6),
            _insn(_MOV64_IMM, 2),
            _insn(_CALL, imm=_BPF_FUNC_xdp_adjust_head),
        ),
    ),
    (5, (_insn(_MOV64_IMM, 0, imm=_XDP_PASS), _insn(_EXIT))),
)

# uapi linux/btf.h
_BTF_MAGIC, _BTF_KIND_INT, _BTF_KIND_FUNC, _BTF_KIND_FUNC_PROTO = 0xEB9F, 1, 12, 13
_BTF_INT_SIGNED = 1


def _strings(*names: str) -> tuple[bytes, dict[str, int]]:
    blob, offsets = b"\0", {}
    for name in names:
        offsets[name] = len(blob)
        blob += name.encode() + b"\0"
    return blob, offsets


def build_btf() -> tuple[bytes, dict[str, int]]:
    """The program's BTF (int, a func proto, the function) and its string offsets."""
    source_lines = SOURCE.splitlines()
    strs, off = _strings("int", NAME, FILE, *source_lines)
    types = struct.pack("<III", off["int"], _BTF_KIND_INT << 24, 4)
    types += struct.pack("<I", _BTF_INT_SIGNED << 24 | 32)
    types += struct.pack("<III", 0, _BTF_KIND_FUNC_PROTO << 24, 1)  # [2] int (void)
    types += struct.pack("<III", off[NAME], _BTF_KIND_FUNC << 24, 2)  # [3] static func
    header = struct.pack("<HBBIIIII", _BTF_MAGIC, 1, 0, 24, 0, len(types), len(types), len(strs))
    return header + types + strs, off


def line_table() -> list[tuple[int, int]]:
    """(instruction index, source line) of every line record, in order."""
    out, index = [], 0
    for line, insns in _LINES:
        out.append((index, line))
        index += len(insns)
    return out


_NR_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_BTF_LOAD = 5, 18
_BPF_PROG_TYPE_XDP = 6
_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char], what: str) -> int:
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"{what}: no bpf(2) number known for {platform.machine()}")
    fd = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return int(fd)


def _load(btf: bytes, offsets: dict[str, int]) -> tuple[int, int]:
    """bpf(BPF_BTF_LOAD) then bpf(BPF_PROG_LOAD) with func and line info; (prog fd, btf fd)."""
    btf_buf = ctypes.create_string_buffer(btf, len(btf))
    attr = ctypes.create_string_buffer(32)
    struct.pack_into("<QQI", attr, 0, ctypes.addressof(btf_buf), 0, len(btf))
    btf_fd = _bpf(_BPF_BTF_LOAD, attr, "load the selftest program's BTF")
    try:
        insns = b"".join(i for _, group in _LINES for i in group)
        code = ctypes.create_string_buffer(insns, len(insns))
        license = ctypes.create_string_buffer(b"GPL")
        func_info = ctypes.create_string_buffer(struct.pack("<II", 0, 3), 8)
        source_lines = SOURCE.splitlines()
        lines = b"".join(
            struct.pack("<IIII", insn, offsets[FILE], offsets[source_lines[line - 1]], line << 10)
            for insn, line in line_table()
        )
        line_info = ctypes.create_string_buffer(lines, len(lines))
        log = ctypes.create_string_buffer(1 << 16)
        attr = ctypes.create_string_buffer(128)
        # union bpf_attr, BPF_PROG_LOAD part (uapi linux/bpf.h)
        struct.pack_into(
            "<IIQQIIQ", attr, 0, _BPF_PROG_TYPE_XDP, len(insns) // 8,
            ctypes.addressof(code), ctypes.addressof(license), 1, len(log), ctypes.addressof(log),
        )  # fmt: skip
        struct.pack_into("16s", attr, 48, NAME.encode())  # prog_name
        struct.pack_into("<II", attr, 72, btf_fd, 8)  # prog_btf_fd, func_info_rec_size
        struct.pack_into("<QII", attr, 80, ctypes.addressof(func_info), 1, 16)
        struct.pack_into("<QI", attr, 96, ctypes.addressof(line_info), len(line_table()))
        try:
            return _bpf(_BPF_PROG_LOAD, attr, "load the selftest program"), btf_fd
        except OSError as exc:
            text = log.value.decode(errors="replace").strip()
            if text:
                raise OSError(exc.errno, f"{exc.strerror}; verifier log: {text}") from None
            raise
    except BaseException:
        os.close(btf_fd)
        raise


@dataclass(frozen=True)
class RunOutcome:
    """One BPF_PROG_TEST_RUN of the program."""

    retval: int
    duration_ns: int


class SelftestProgram:
    """The loaded program: a tracing target (it has `.fd`), runnable, closed by `close()`."""

    def __init__(self) -> None:
        btf, offsets = build_btf()
        self.fd, self._btf_fd = _load(btf, offsets)
        self.name = NAME
        self._finalizer = weakref.finalize(self, _close_fds, [self.fd, self._btf_fd])

    def run(self, packet: bytes = bytes(64)) -> RunOutcome:
        """Run the program once on `packet` with BPF_PROG_TEST_RUN."""
        opts = bpf_test_run_opts(sz=ctypes.sizeof(bpf_test_run_opts))
        data = ctypes.create_string_buffer(packet, len(packet))
        out = ctypes.create_string_buffer(len(packet) + 256)
        opts.data_in, opts.data_size_in = ctypes.addressof(data), len(packet)
        opts.data_out, opts.data_size_out = ctypes.addressof(out), len(out)
        opts.repeat = 1
        check_int(lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), f"test run of {NAME}")
        return RunOutcome(opts.retval, opts.duration)

    def close(self) -> None:
        """Unload the program and its BTF (idempotent)."""
        self._finalizer()

    def __enter__(self) -> SelftestProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


def load_program() -> SelftestProgram:
    """Load the selftest program (root: BPF and BTF loading need CAP_BPF/CAP_SYS_ADMIN)."""
    return SelftestProgram()
