"""Where the kernel's struct members the LBR tracer reads are, from the kernel's BTF, once per process.

The tracer (bpf/lbr_tracer.bpf.c) reads a task's tgid (following forks) and, on
arm64, its `thread_info.preempt_count`; on x86 between v6.2 and v6.15 the
per-CPU `preempt_count` is a member of `struct pcpu_hot`. Their offsets used to
be CO-RE relocations in the object, and an object with any CO-RE relocation
makes libbpf read and parse the whole vmlinux BTF (~5 MB) at every load, the
larger part of a hook's load. Read here, that parse happens once
per process and the offsets reach the tracer in its config (struct lbr_config).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from pytest_lbr.bpf.libbpf import btf_member, btf_type, lib

__all__ = ["TracerOffsets", "member_offset", "resolve_type", "tracer_offsets"]

_KIND_STRUCT, _KIND_UNION = 4, 5
#: typedef, volatile, const, restrict, type_tag: names for another type.
_MODIFIERS = frozenset({8, 9, 10, 11, 18})


@dataclass(frozen=True)
class TracerOffsets:
    """Byte offsets the tracer's config carries; None where the kernel's BTF lacks the member."""

    task_tgid: int | None
    """offsetof(struct task_struct, tgid)."""
    task_preempt_count: int | None
    """offsetof(struct task_struct, thread_info.preempt_count): arm64's (x86 has none there)."""
    pcpu_hot_preempt_count: int | None
    """offsetof(struct pcpu_hot, preempt_count): x86 from v6.2 to v6.14."""


@functools.cache
def tracer_offsets() -> TracerOffsets:
    """The offsets in the running kernel (its BTF, /sys/kernel/btf/vmlinux, parsed once).

    Without kernel BTF every offset is None; nothing here raises for that.
    """
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return TracerOffsets(None, None, None)
    try:
        return TracerOffsets(
            task_tgid=member_offset(btf, "task_struct", "tgid"),
            task_preempt_count=member_offset(btf, "task_struct", "thread_info.preempt_count"),
            pcpu_hot_preempt_count=member_offset(btf, "pcpu_hot", "preempt_count"),
        )
    finally:
        lib.btf__free(btf)


def member_offset(btf: int, struct: str, path: str) -> int | None:
    """Byte offset of member `path` ("a.b.c") within `struct <struct>` in the BTF `btf`.

    Members of anonymous structs and unions count as the enclosing type's, as in
    C. None where the struct or a member is missing, a step of the path is not a
    struct or union, or the member is a bitfield (it has no byte address).
    """
    type_id = lib.btf__find_by_name_kind(btf, struct.encode(), _KIND_STRUCT)
    if type_id <= 0:
        return None
    bits = 0
    for name in path.split("."):
        found = _find_member(btf, type_id, name.encode())
        if found is None:
            return None
        offset, bitfield_size, type_id = found
        if bitfield_size:
            return None
        bits += offset
    return bits // 8 if bits % 8 == 0 else None


def resolve_type(btf: int, type_id: int) -> tuple[int, btf_type] | None:
    """The type `type_id` names through typedefs and qualifiers: (id, its btf_type)."""
    for _ in range(32):  # a loop in the BTF would be malformed: give up rather than spin
        addr = lib.btf__type_by_id(btf, type_id)
        if not addr:
            return None
        t = btf_type.from_address(addr)
        if (t.info >> 24) & 0x1F not in _MODIFIERS:
            return type_id, t
        type_id = t.size  # `size` is a union with `type`
    return None


def _find_member(btf: int, type_id: int, name: bytes) -> tuple[int, int, int] | None:
    """(bit offset, bitfield size, type id) of member `name` of struct/union `type_id`.

    Searches anonymous struct and union members too, depth first, adding their offsets.
    """
    resolved = resolve_type(btf, type_id)
    if resolved is None:
        return None
    _, t = resolved
    if (t.info >> 24) & 0x1F not in (_KIND_STRUCT, _KIND_UNION):
        return None
    kind_flag = t.info >> 31
    vlen = t.info & 0xFFFF
    members = (btf_member * vlen).from_address(ctypes.addressof(t) + ctypes.sizeof(btf_type))
    for m in members:
        # With kind_flag set the offset packs the bitfield size into its top 8 bits.
        offset, bitfield_size = (
            (m.offset & 0xFFFFFF, m.offset >> 24) if kind_flag else (m.offset, 0)
        )
        member_name = lib.btf__str_by_offset(btf, m.name_off) if m.name_off else b""
        if member_name == name:
            return offset, bitfield_size, m.type
        if not member_name:
            inner = _find_member(btf, m.type, name)
            if inner is not None:
                return offset + inner[0], inner[1], inner[2]
    return None
