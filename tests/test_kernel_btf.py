"""The kernel struct offsets the LBR tracer gets in its config instead of CO-RE relocations
(the kernel tests check what the tracer does with them: test_scope's XDP-in-softirq and
children-scope tests)."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from pytest_lbr.bpf.libbpf import lib
from pytest_lbr.capture.hooks import loader as hooks
from pytest_lbr.capture.hooks.tracer_object import tracer_object
from pytest_lbr.kernel.kernel_btf import TracerOffsets, member_offset, tracer_offsets

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")

# BTF kinds and the raw encoding (include/uapi/linux/btf.h).
INT, STRUCT, UNION, TYPEDEF, CONST = 1, 4, 5, 8, 10


def _info(kind: int, vlen: int = 0, kind_flag: int = 0) -> int:
    return kind_flag << 31 | kind << 24 | vlen


class _Btf:
    """A raw BTF blob built type by type (ids from 1, in the order added)."""

    def __init__(self) -> None:
        self.types = b""
        self.strings = b"\0"

    def name(self, s: str) -> int:
        if not s:
            return 0
        off = len(self.strings)
        self.strings += s.encode() + b"\0"
        return off

    def int_(self, name: str, size: int) -> None:
        self.types += struct.pack("<III", self.name(name), _info(INT), size)
        self.types += struct.pack("<I", size * 8)

    def ref(self, kind: int, name: str, to: int) -> None:
        self.types += struct.pack("<III", self.name(name), _info(kind), to)

    def composite(
        self,
        kind: int,
        name: str,
        size: int,
        members: list[tuple[str, int, int, int]],
        kind_flag: int = 0,
    ) -> None:
        """members: (name, type id, bit offset, bitfield size)."""
        self.types += struct.pack(
            "<III", self.name(name), _info(kind, len(members), kind_flag), size
        )
        for mname, mtype, bits, bitfield in members:
            offset = bitfield << 24 | bits if kind_flag else bits
            self.types += struct.pack("<III", self.name(mname), mtype, offset)

    def blob(self) -> bytes:
        header = struct.pack(
            "<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types), len(self.types), len(self.strings)
        )
        return header + self.types + self.strings


@pytest.fixture(scope="module")
def arm64_like_btf() -> Iterator[int]:
    """A task_struct shaped like arm64's: thread_info (embedded, through a typedef) whose
    preempt_count is in an anonymous union; kind_flag set, with bitfields before tgid."""
    b = _Btf()
    b.int_("unsigned int", 4)  # 1
    b.int_("long long unsigned int", 8)  # 2
    b.composite(STRUCT, "", 8, [("count", 1, 0, 0), ("need_resched", 1, 32, 0)])  # 3
    b.composite(UNION, "", 8, [("preempt_count", 2, 0, 0), ("preempt", 3, 0, 0)])  # 4
    b.composite(  # 5
        STRUCT, "thread_info", 24, [("flags", 2, 0, 0), ("ttbr0", 2, 64, 0), ("", 4, 128, 0)]
    )
    b.ref(TYPEDEF, "thread_info_t", 5)  # 6
    b.ref(CONST, "", 6)  # 7
    b.composite(  # 8
        STRUCT,
        "task_struct",
        48,
        [
            ("thread_info", 7, 0, 0),
            ("__state", 1, 192, 0),
            ("in_execve", 1, 224, 1),  # a one-bit bitfield
            ("byte_aligned_bits", 1, 232, 8),  # a bitfield that happens to start on a byte
            ("tgid", 1, 256, 0),
            ("", 4, 320, 0),  # an anonymous union straight in task_struct
        ],
        kind_flag=1,
    )
    data = b.blob()
    buf = ctypes.create_string_buffer(data, len(data))
    btf = lib.btf__new(buf, len(data))
    assert btf and not lib.libbpf_get_error(btf)
    yield btf
    lib.btf__free(btf)


@pytest.mark.parametrize(
    ("path", "offset"),
    [
        ("tgid", 32),
        ("__state", 24),
        ("thread_info", 0),
        ("thread_info.ttbr0", 8),
        ("thread_info.preempt_count", 16),  # through a const typedef and an anonymous union
        ("thread_info.preempt.count", 16),
        ("thread_info.preempt.need_resched", 20),
        ("preempt_count", 40),  # an anonymous union of task_struct itself
        ("need_resched", None),  # inside a named member: not task_struct's
        ("in_execve", None),  # bitfields have no byte address
        ("byte_aligned_bits", None),
        ("no_such_member", None),
        ("tgid.x", None),  # tgid is no struct
        ("thread_info.nope", None),
    ],
)
def test_member_offset(arm64_like_btf: int, path: str, offset: int | None) -> None:
    assert member_offset(arm64_like_btf, "task_struct", path) == offset


def test_a_missing_struct_has_no_offset(arm64_like_btf: int) -> None:
    assert member_offset(arm64_like_btf, "pcpu_hot", "preempt_count") is None
    # only structs are looked up by name: a typedef of one is not it
    assert member_offset(arm64_like_btf, "thread_info_t", "flags") is None


def _bpftool_member_bits(struct_name: str, member: str) -> int | None:
    """bits_offset of a direct member of a struct in the host's kernel BTF, as bpftool says."""
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed")
    dump = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(VMLINUX_BTF), "format", "raw"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    inside = False
    for line in dump.splitlines():
        if not line.startswith("\t"):
            if inside:
                return None
            inside = f"] STRUCT '{struct_name}' " in line
        elif inside and line.split("'")[1] == member:
            return int(line.split("bits_offset=")[1].split()[0])
    return None


@pytest.mark.skipif(not VMLINUX_BTF.exists(), reason="no kernel BTF on this machine")
def test_the_running_kernels_offsets_agree_with_bpftool() -> None:
    offsets = tracer_offsets()
    bits = _bpftool_member_bits("task_struct", "tgid")
    assert bits is not None and offsets.task_tgid == bits // 8
    assert offsets.task_tgid > 0
    hot = _bpftool_member_bits("pcpu_hot", "preempt_count")  # x86 v6.2-v6.14 only
    assert offsets.pcpu_hot_preempt_count == (None if hot is None else hot // 8)
    assert tracer_offsets() is offsets  # read once per process


def test_without_kernel_btf_every_offset_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoBtf:
        def __getattr__(self, name: str) -> object:
            return getattr(lib, name)

        def btf__load_vmlinux_btf(self) -> int:
            return 0

    monkeypatch.setattr("pytest_lbr.kernel.kernel_btf.lib", NoBtf())
    tracer_offsets.cache_clear()
    try:
        assert tracer_offsets() == TracerOffsets(None, None, None)
    finally:
        tracer_offsets.cache_clear()


@pytest.mark.parametrize(
    ("syms", "offsets", "expected"),
    [
        # 6.12: pcpu_hot + the member's offset from BTF
        (
            {"pcpu_hot": 0x32000, "__per_cpu_offset": 0xFFFF0000},
            TracerOffsets(2340, None, 8),
            {"sym_preempt_count": 0x32008, "sym_per_cpu_offset": 0xFFFF0000, "task_tgid": 2340},
        ),
        # 6.1 (and 6.15+): __preempt_count itself
        (
            {"__preempt_count": 0x2A000, "pcpu_hot": 0x32000, "__per_cpu_offset": 0xFFFF0000},
            TracerOffsets(2340, None, 8),
            {"sym_preempt_count": 0x2A000, "sym_per_cpu_offset": 0xFFFF0000, "task_tgid": 2340},
        ),
        # pcpu_hot in kallsyms but not in BTF: no preempt_count, nothing guessed
        (
            {"pcpu_hot": 0x32000, "__per_cpu_offset": 0xFFFF0000},
            TracerOffsets(None, None, None),
            {"sym_preempt_count": 0, "sym_per_cpu_offset": 0xFFFF0000, "task_tgid": 0},
        ),
    ],
)
def test_x86_config_fields(
    monkeypatch: pytest.MonkeyPatch,
    syms: dict[str, int],
    offsets: TracerOffsets,
    expected: dict[str, int],
) -> None:
    if hooks.machine().name != "x86_64":
        pytest.skip("the x86 fields are filled on x86 only")
    monkeypatch.setattr(hooks, "preempt_count_symbols", lambda: syms)
    monkeypatch.setattr(hooks, "tracer_offsets", lambda: offsets)
    assert hooks._kernel_config() == {**expected, "task_preempt_count": 0}


def _core_relo_len(obj: Path) -> int:
    """core_relo_len of the object's .BTF.ext header (0 where the header predates it)."""
    with obj.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".BTF.ext")
        assert section is not None, f"{obj} has no .BTF.ext"
        data = section.data()
    magic, _version, _flags, hdr_len, _func_info_off, func_info_len = struct.unpack_from(
        "<HBBIII", data
    )
    assert magic == 0xEB9F
    assert func_info_len > 0  # the header read is the one the programs' BTF is in
    if hdr_len < 32:  # struct btf_ext_header without core_relo_off/len
        return 0
    (core_relo_len,) = struct.unpack_from("<I", data, 28)
    return int(core_relo_len)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_tracer_has_no_core_relocation(arch: str) -> None:
    """With one, libbpf parses the whole vmlinux BTF at every hook load, even of an fexit
    hook on a BPF program that needs none of it: the larger part of the load."""
    try:
        obj = tracer_object(arch)
    except FileNotFoundError as exc:
        pytest.skip(f"{exc.filename} not built (make -C bpf)")
    assert _core_relo_len(obj) == 0
