"""BPF helpers as the running kernel implements them: names, implementations, call sites.

Everything here is read from the kernel, never from a table kept by hand:
- helper ids and names from the `enum bpf_func_id` of the kernel's BTF
  (BPF_FUNC_map_lookup_elem = 1 -> "bpf_map_lookup_elem");
- which kernel function implements a helper from its `bpf_<helper>_proto`
  (a `struct bpf_func_proto` whose first member `func` points at the
  implementation: `bpf_get_prandom_u32_proto.func == bpf_user_rnd_u32`), read
  through /proc/kcore (root; kallsyms must list data symbols);
- a loaded program's translated instructions (BPF_OBJ_GET_INFO_BY_FD
  xlated_prog_insns; what they say is `pytest_lbr.bytecode`'s to read);
- which programs a program can tail-call, from the program-array maps it uses.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
from collections.abc import Callable, Iterable
from ctypes import Structure, c_char, c_uint8, c_uint32, c_uint64

from pytest_lbr.bpf.libbpf import BpfError, btf_type, check_int, lib, prog_info

__all__ = [
    "BPF_MAP_TYPE_PROG_ARRAY",
    "bpf_map_info",
    "helper_ids",
    "helper_implementations",
    "map_op_implementations",
    "map_type",
    "prog_array_members",
    "verifier_inlines",
    "xlated_insns",
]

_BTF_KIND_ENUM = 6
_PT_LOAD = 1


def xlated_insns(fd: int) -> bytes:
    """The translated instructions of the program behind `fd` (raises BpfError)."""
    info, _ = prog_info(fd)
    _, bufs = prog_info(fd, xlated_prog_insns=("xlated_prog_len", info.xlated_prog_len, c_uint8))
    return bytes(bufs["xlated_prog_insns"])[: info.xlated_prog_len]


def helper_ids() -> dict[int, str]:
    """Helper id -> name as bpf_helpers.h spells it, from the kernel's `enum bpf_func_id`.

    Empty when the kernel has no BTF (/sys/kernel/btf/vmlinux).
    """
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return {}
    try:
        tid = lib.btf__find_by_name_kind(btf, b"bpf_func_id", _BTF_KIND_ENUM)
        if tid <= 0:
            return {}
        t = lib.btf__type_by_id(btf, tid)
        head = btf_type.from_address(t)
        out: dict[int, str] = {}
        for k in range(head.info & 0xFFFF):
            name_off, val = struct.unpack_from(
                "<Ii", ctypes.string_at(t + ctypes.sizeof(btf_type) + 8 * k, 8)
            )
            name = lib.btf__str_by_offset(btf, name_off).decode()
            if name.startswith("BPF_FUNC_") and name != "BPF_FUNC_unspec":
                out[val] = "bpf_" + name.removeprefix("BPF_FUNC_")
        return out
    finally:
        lib.btf__free(btf)


class KernelMemory:
    """Reads kernel virtual memory through /proc/kcore (an ELF core file; root)."""

    def __init__(self, path: str = "/proc/kcore") -> None:
        self._f = open(path, "rb")  # noqa: SIM115 -- closed by close()
        hdr = self._f.read(64)
        if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            self.close()
            raise OSError(f"{path} is not a 64-bit ELF core file")
        phoff = struct.unpack_from("<Q", hdr, 32)[0]
        phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
        self._f.seek(phoff)
        table = self._f.read(phentsize * phnum)
        self._loads = []
        for k in range(phnum):
            p_type, _, off, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, k * phentsize)
            if p_type == _PT_LOAD:
                self._loads.append((vaddr, filesz, off))

    def read(self, addr: int, size: int) -> bytes | None:
        """`size` bytes at kernel address `addr`, or None outside what kcore maps."""
        for vaddr, filesz, off in self._loads:
            if vaddr <= addr and addr + size <= vaddr + filesz:
                return os.pread(self._f.fileno(), size, off + addr - vaddr)
        return None

    def close(self) -> None:
        """Close /proc/kcore (idempotent)."""
        self._f.close()


#: Proto name parts that are not in the helper's name: the kernel's variants
#: for some program types (kernel/trace/bpf_trace.c: bpf_get_stackid_proto_tp,
#: bpf_perf_event_output_proto_raw_tp, bpf_sk_storage_get_tracing_proto) and the
#: unsafe reads kept for old programs (bpf_probe_read_compat_str_proto runs
#: bpf_probe_read_str: Linux kernel commit 0ebeea8ca8a4 ("bpf: Restrict
#: bpf_probe_read{, str}() only to archs where they work") (in v5.5)).
_PROTO_SUFFIXES = ("_proto_raw_tp", "_proto_tp", "_proto_pe", "_tracing_proto", "_proto")


def proto_helper(symbol: str, helpers: set[str]) -> str | None:
    """The helper a `struct bpf_func_proto` named `symbol` serves, where its name says
    it (`bpf_probe_read_compat_str_proto` -> `bpf_probe_read_str`); else None."""
    for suffix in _PROTO_SUFFIXES:
        if symbol.endswith(suffix):
            base = symbol.removesuffix(suffix)
            for name in (base, base.replace("_compat", "", 1)):
                if name in helpers:
                    return name
            return None
    return None


def helper_implementations(
    names: Iterable[str],
    locate: Callable[[int], str | None],
    data_address: Callable[[str], int | None] | None = None,
    listed: Iterable[tuple[str, int]] | None = None,
) -> tuple[dict[str, str], str]:
    """(kernel function -> helper name, "" or why none could be read).

    For every helper in `names` with a `bpf_<helper>_proto` in kallsyms, read
    the proto's `func` (its first member, struct bpf_func_proto in
    include/linux/bpf.h) and name it with `locate` (address -> function name).
    A helper whose implementation has its own name (bpf_ktime_get_ns) maps to
    itself. `data_address` (a proto's live address from elsewhere, e.g. the
    debug vmlinux) is asked when kallsyms lists no data symbols. `listed`: the
    `*_proto` (name, address) pairs of the caller's read of kallsyms
    (`symbols.kallsyms.KernelSymbols.protos`, whose parser is the only one; None or
    empty: kallsyms lists none).
    """
    helpers = set(names)
    wanted = {f"{n}_proto": n for n in helpers}
    try:
        symbols = list(listed or ())
        protos = [(wanted[s], a) for s, a in symbols if s in wanted]
        # Protos named otherwise come after those named exactly (which win).
        protos += [
            (h, a) for s, a in symbols if s not in wanted and (h := proto_helper(s, helpers))
        ]
    except OSError as exc:
        return {}, f"cannot read /proc/kallsyms: {exc.strerror}"
    if not protos and data_address is not None:
        # kallsyms lists no variables without CONFIG_KALLSYMS_ALL (Debian's arm64
        # 6.1): the debug vmlinux's symbol table has them.
        found = ((helper, data_address(proto)) for proto, helper in wanted.items())
        protos = [(helper, a) for helper, a in found if a]
    if not protos:
        return {}, (
            "kallsyms lists no bpf_*_proto data symbols (CONFIG_KALLSYMS_ALL off) "
            "and no debug vmlinux gives them (--lbr-vmlinux)"
        )
    try:
        mem = KernelMemory()
    except OSError as exc:
        return {}, f"cannot read kernel memory (/proc/kcore): {exc.strerror or exc}"
    out: dict[str, str] = {}
    try:
        for helper, addr in protos:
            raw = mem.read(addr, 8)
            func = locate(struct.unpack("<Q", raw)[0]) if raw else None
            if func is not None:
                out.setdefault(func, helper)
    finally:
        mem.close()
    return out, ""


#: struct bpf_map_ops members the verifier calls directly for a helper's call
#: (kernel/bpf/verifier.c, do_misc_fixups: "patch_map_ops_generic"; Linux kernel
#: commit 09772d92cd5a ("bpf: avoid retpoline for lookup/update/delete calls on
#: maps") (in v5.0), extended since to the rest of this table).
MAP_OP_HELPERS = {
    "map_lookup_elem": "bpf_map_lookup_elem",
    "map_update_elem": "bpf_map_update_elem",
    "map_delete_elem": "bpf_map_delete_elem",
    "map_push_elem": "bpf_map_push_elem",
    "map_pop_elem": "bpf_map_pop_elem",
    "map_peek_elem": "bpf_map_peek_elem",
    "map_redirect": "bpf_redirect_map",
    "map_for_each_callback": "bpf_for_each_map_elem",
    "map_lookup_percpu_elem": "bpf_map_lookup_percpu_elem",
}


def map_op_implementations(
    locate: Callable[[int], str | None], listed: Iterable[tuple[str, int]]
) -> dict[str, str]:
    """kernel function -> the helper a BPF program's call of it was written as, for
    every map type's `struct bpf_map_ops` (`*_map_ops` data symbols in `listed`).

    A program calls `htab_map_update_elem` only because the verifier rewrote its
    `bpf_map_update_elem()` into the map's own op, so this names the calls of programs
    loaded elsewhere (bcc, bpftool), whose instructions as written are unknown. A
    hash map's lookup is inlined around a call of `__htab_map_lookup_elem`
    (htab_map_gen_lookup, kernel/bpf/hashtab.c: Linux kernel commit 9015d2f59535
    ("bpf: inline htab_map_lookup_elem()") (in v4.13)): "__" + a lookup op names
    a lookup too. Empty without root, kcore or the kernel's BTF.
    """
    ops = [(name, addr) for name, addr in listed if name.endswith("_map_ops")]
    if not ops:
        return {}
    from pytest_lbr.kernel.kernel_btf import member_offset

    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return {}
    try:
        offsets = {
            field: off
            for field in MAP_OP_HELPERS
            if (off := member_offset(btf, "bpf_map_ops", field)) is not None
        }
    finally:
        lib.btf__free(btf)
    try:
        mem = KernelMemory()
    except OSError:
        return {}
    out: dict[str, str] = {}
    try:
        for _, addr in ops:
            for field, off in offsets.items():
                raw = mem.read(addr + off, 8)
                ptr = struct.unpack("<Q", raw)[0] if raw else 0
                func = locate(ptr) if ptr else None
                if func is None:
                    continue
                out.setdefault(func, MAP_OP_HELPERS[field])
                if field == "map_lookup_elem":
                    out.setdefault(f"__{func}", "bpf_map_lookup_elem")
    finally:
        mem.close()
    return out


#: Helpers the verifier replaces with instructions of its own (no call is left in
#: the translated program), with the first release that does it (kernel/bpf/verifier.c).
#: Checked against the running kernels up to `_INLINES_CHECKED_UP_TO`; for a newer
#: kernel a call missing from the translation is "unknown" unless listed here.
_VERIFIER_INLINES: dict[str, tuple[tuple[int, int], frozenset[str]]] = {
    # map_gen_lookup: array maps, Linux kernel commit 81ed18ab3098 ("bpf: add helper
    # inlining infra and optimize map_array lookup") (in v4.12); hash maps 9015d2f59535 (v4.13).
    "bpf_map_lookup_elem": ((4, 13), frozenset({"x86_64", "aarch64"})),
    # 5576b991e9c1 ("bpf: Add BPF_FUNC_jiffies64") (in v5.5): on 64-bit with a JIT.
    "bpf_jiffies64": ((5, 5), frozenset({"x86_64", "aarch64"})),
    # 9b99edcae5c8 ("bpf: Add bpf_get_func_ip helper for tracing programs") (in v5.15).
    "bpf_get_func_ip": ((5, 15), frozenset({"x86_64", "aarch64"})),
    # f92c1e183604 ("bpf: Add get_func_[arg|ret|arg_cnt] helpers") (in v5.17).
    "bpf_get_func_arg": ((5, 17), frozenset({"x86_64", "aarch64"})),
    "bpf_get_func_ret": ((5, 17), frozenset({"x86_64", "aarch64"})),
    "bpf_get_func_arg_cnt": ((5, 17), frozenset({"x86_64", "aarch64"})),
    # 1ade23711971 ("bpf: Inline calls to bpf_loop when callback is known") (in v5.19).
    "bpf_loop": ((5, 19), frozenset({"x86_64", "aarch64"})),
    # 314a53623cd4 ("bpf: inline bpf_get_branch_snapshot() helper") (in v6.9): x86-64.
    "bpf_get_branch_snapshot": ((6, 9), frozenset({"x86_64"})),
    # 1ae6921009e5 ("bpf: inline bpf_get_smp_processor_id() helper") (in v6.10): x86-64.
    "bpf_get_smp_processor_id": ((6, 10), frozenset({"x86_64"})),
    # b4b7a4099b8c ("bpf: Support inlining bpf_kptr_xchg() helper") (in v6.10).
    "bpf_kptr_xchg": ((6, 10), frozenset({"x86_64", "aarch64"})),
}
#: The newest series whose verifier the table above was checked against (Debian's 6.12).
_INLINES_CHECKED_UP_TO = (6, 12)


def _series(release: str) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", release)
    return (int(found[1]), int(found[2])) if found else None


def verifier_inlines(helper: str, release: str, arch: str) -> bool | None:
    """Does this kernel's verifier inline calls of `helper` (on `arch`, `uname -m`)?
    None when the kernel is newer than the table was checked against and does not
    list it: a call missing from its translation may be either."""
    since = _VERIFIER_INLINES.get(helper)
    series = _series(release)
    if since is not None and series is not None and series >= since[0] and arch in since[1]:
        return True
    if series is None or series > _INLINES_CHECKED_UP_TO:
        return None
    return False


class bpf_map_info(Structure):  # noqa: N801 -- uapi name
    """`struct bpf_map_info` (uapi linux/bpf.h), up to btf_value_type_id: the kernel
    fills as much as the size given says."""

    _fields_ = [
        ("type", c_uint32),
        ("id", c_uint32),
        ("key_size", c_uint32),
        ("value_size", c_uint32),
        ("max_entries", c_uint32),
        ("map_flags", c_uint32),
        ("name", c_char * 16),
        ("ifindex", c_uint32),
        ("btf_vmlinux_value_type_id", c_uint32),
        ("netns_dev", c_uint64),
        ("netns_ino", c_uint64),
        ("btf_id", c_uint32),
        ("btf_key_type_id", c_uint32),
        ("btf_value_type_id", c_uint32),
    ]


#: BPF_MAP_TYPE_PROG_ARRAY: the map a program's tail calls go through.
BPF_MAP_TYPE_PROG_ARRAY = 3


def _open_map(map_id: int) -> tuple[int, bpf_map_info]:
    """(an fd of map `map_id`, the head of its info); the caller closes the fd. Raises BpfError."""
    mfd = check_int(lib.bpf_map_get_fd_by_id(map_id), f"bpf_map_get_fd_by_id({map_id})")
    try:
        minfo = bpf_map_info()
        size = c_uint32(ctypes.sizeof(minfo))
        check_int(
            lib.bpf_obj_get_info_by_fd(mfd, ctypes.byref(minfo), ctypes.byref(size)),
            "bpf_obj_get_info_by_fd",
        )
    except BpfError:
        os.close(mfd)
        raise
    return mfd, minfo


def map_type(map_id: int) -> int:
    """The type (BPF_MAP_TYPE_*) of map `map_id`; raises BpfError (ENOENT: gone)."""
    mfd, minfo = _open_map(map_id)
    os.close(mfd)
    return int(minfo.type)


def prog_array_members(map_id: int) -> list[int]:
    """Ids of the programs in program array `map_id` (what tail calls through it can
    enter; [] for another type of map); raises BpfError (ENOENT: gone)."""
    mfd, minfo = _open_map(map_id)
    try:
        if minfo.type != BPF_MAP_TYPE_PROG_ARRAY:
            return []
        out: list[int] = []
        for key in range(minfo.max_entries):
            # A lookup in a program array from user space gives the program's id.
            k, v = c_uint32(key), c_uint32(0)
            if lib.bpf_map_lookup_elem(mfd, ctypes.byref(k), ctypes.byref(v)) == 0:
                out.append(v.value)
        return out
    finally:
        os.close(mfd)
