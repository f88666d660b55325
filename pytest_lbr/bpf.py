"""Load BPF objects and run their programs: the object behind the `bpf` fixture.

    loader = BpfLoader()
    obj = loader.load("tests/bpf/build/xdp_helpers.bpf.o")
    prog = obj.programs["xdp_helpers"]
    res = prog.run(data=packet)            # BPF_PROG_TEST_RUN
    obj.maps["counts"].lookup(0x45)        # -> bytes | None
    loader.close()                         # closes every object it loaded

Map keys and values are `bytes` of exactly the map's key/value size, or an
`int`, packed little-endian (the byte order of x86-64 and arm64) to that size.
Values come back as `bytes`; for per-CPU maps a lookup returns the values of
every possible CPU back to back, each padded to 8 bytes, as the kernel does.

Every kernel handle is a context manager with `close()`, backed by
`weakref.finalize`; programs and maps keep their object alive.
"""

from __future__ import annotations

import ctypes
import errno
import os
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_lbr.errors import UserError
from pytest_lbr.libbpf import (
    BpfError,
    bpf_test_run_opts,
    check_int,
    check_ptr,
    lib,
    libbpf_messages,
    prog_info,
)

__all__ = [
    "BpfLoadError",
    "BpfLoader",
    "BpfObject",
    "BpfObjectNotFound",
    "Link",
    "Map",
    "NotABpfObject",
    "Program",
    "RunResult",
]

_ELF_MAGIC = b"\x7fELF"
_EM_BPF = 247
# Room for data_out beyond data_in: XDP and skb programs may grow the packet
# (bpf_xdp_adjust_head with a negative delta, bpf_skb_change_tail ...).
_DATA_OUT_SLACK = 4096
# Map types whose values are per possible CPU (uapi enum bpf_map_type):
# PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE.
_PERCPU_MAP_TYPES = {5, 6, 10, 21}

_T = TypeVar("_T")


class BpfLoadError(BpfError):
    """A BPF object could not be opened or loaded; `log` holds libbpf's
    messages, including the verifier log when the verifier rejected a program."""

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n{self.log}" if self.log else text

    @property
    def verifier_log(self) -> str:
        """The kernel verifier's log of the rejected program(s), "" if none."""
        parts = []
        for chunk in self.log.split("-- BEGIN PROG LOAD LOG --\n")[1:]:
            parts.append(chunk.split("-- END PROG LOAD LOG --")[0])
        return "".join(parts)


class BpfObjectNotFound(UserError, FileNotFoundError):
    """`bpf.load(path)`: no file there; the message names every place tried."""


class NotABpfObject(UserError, BpfLoadError):
    """`bpf.load(path)`: the file is not a BPF ELF object (clang -target bpf)."""


@dataclass(frozen=True)
class RunResult:
    """What one BPF_PROG_TEST_RUN returned.

    `retval` is the program's return value (e.g. an XDP verdict), `data` the
    packet after the program ran, `duration_ns` the kernel's average time per
    repetition, `ctx` the context after the run when a `ctx` was passed in.
    """

    retval: int
    data: bytes
    duration_ns: int
    ctx: bytes | None = None


class _ByName(Mapping[str, _T]):
    """A read-only mapping whose missing-key error lists what exists."""

    def __init__(self, kind: str, owner: str, items: dict[str, _T]) -> None:
        self._kind = kind
        self._owner = owner
        self._items = items

    def __getitem__(self, name: str) -> _T:
        try:
            return self._items[name]
        except KeyError:
            have = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"no {self._kind} {name!r} in {self._owner}; it has: {have}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<{self._kind}s of {self._owner}: {', '.join(self._items)}>"


class BpfObject:
    """One loaded BPF ELF object: its `programs` and `maps` by name.

    Closing it (or the loader that made it) unloads every program and map
    that nothing else holds.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._ptr = _open_and_load(self.path)
        #: Links made by `Program.attach()`: destroyed before the object closes.
        self._links: list[Link] = []
        self._finalizer = weakref.finalize(self, _close_object, self._ptr, self._links)
        progs: dict[str, Program] = {}
        p = lib.bpf_object__next_program(self._ptr, None)
        while p:
            prog = Program(self, p)
            progs[prog.name] = prog
            p = lib.bpf_object__next_program(self._ptr, p)
        maps: dict[str, Map] = {}
        m = lib.bpf_object__next_map(self._ptr, None)
        while m:
            bmap = Map(self, m)
            maps[bmap.name] = bmap
            m = lib.bpf_object__next_map(self._ptr, m)
        self.programs: Mapping[str, Program] = _ByName("program", self.path.name, progs)
        self.maps: Mapping[str, Map] = _ByName("map", self.path.name, maps)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Close the object and with it every program and map fd (idempotent)."""
        self._finalizer()

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise ValueError(f"{what}: {self.path.name} is closed")

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"programs={list(self.programs)}"
        return f"<BpfObject {self.path} {state}>"


def _close_object(ptr: int, links: list[Link]) -> None:
    for link in links:
        link.close()
    lib.bpf_object__close(ptr)


def _open_and_load(path: Path) -> int:
    """bpf_object__open_file + bpf_object__load, with errors a user can act on."""
    shown = str(path)
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except FileNotFoundError:
        raise BpfObjectNotFound(
            errno.ENOENT, "BPF object not found (build it first?)", shown
        ) from None
    except IsADirectoryError:
        raise IsADirectoryError(errno.EISDIR, "BPF object path is a directory", shown) from None
    if head[:4] != _ELF_MAGIC:
        raise NotABpfObject(
            errno.ENOEXEC, f"{shown} is not an ELF file (expected a clang -target bpf .o)"
        )
    if int.from_bytes(head[18:20], "little") != _EM_BPF:
        raise NotABpfObject(
            errno.ENOEXEC, f"{shown} is an ELF file but not a BPF object (e_machine != EM_BPF)"
        )
    with libbpf_messages() as log:
        ptr = lib.bpf_object__open_file(os.fsencode(path), None)
        err = ctypes.get_errno()
        if not ptr:
            raise BpfLoadError(err or errno.EINVAL, f"cannot open BPF object {shown}", "".join(log))
        ret = lib.bpf_object__load(ptr)
        if ret < 0:
            lib.bpf_object__close(ptr)
            raise BpfLoadError(-ret, f"cannot load BPF object {shown}", "".join(log))
    return int(ptr)


class Program:
    """One loaded BPF program of a `BpfObject`."""

    def __init__(self, obj: BpfObject, ptr: int) -> None:
        self._obj = obj  # keeps the object (and so the fd) alive
        self._ptr = ptr
        #: The program's function name (the kernel keeps only its first 15 bytes).
        self.name: str = lib.bpf_program__name(ptr).decode()
        self._fd: int = lib.bpf_program__fd(ptr)
        info, _ = prog_info(self._fd)
        #: Kernel program id (as in `bpftool prog show`).
        self.id: int = info.id
        #: Kernel program tag, 16 hex digits (as in /proc/kallsyms bpf_prog_<tag>_<name>).
        self.tag: str = bytes(info.tag).hex()
        self._type_id: int = info.type

    @property
    def fd(self) -> int:
        """The program's fd, owned by its object (do not close it)."""
        self._obj._check_open(f"program {self.name}")
        return self._fd

    @property
    def type(self) -> str:
        """Program type as libbpf names it: "xdp", "kprobe", "tracing", ..."""
        name = lib.libbpf_bpf_prog_type_str(self._type_id)
        return name.decode() if name else str(self._type_id)

    @property
    def object(self) -> BpfObject:
        return self._obj

    def run(
        self,
        data: bytes | bytearray = b"",
        *,
        ctx: bytes | bytearray | ctypes.Structure | None = None,
        repeat: int = 1,
    ) -> RunResult:
        """Run the program once (or `repeat` times) in the kernel with BPF_PROG_TEST_RUN.

        `data` is the packet (XDP and skb programs need at least an Ethernet
        header: 14 bytes); `ctx` the context (e.g. `struct xdp_md` or, for
        raw tracepoints, the arguments), as bytes or a ctypes structure.
        """
        data = bytes(data)
        opts = bpf_test_run_opts(sz=ctypes.sizeof(bpf_test_run_opts))
        data_in = ctypes.create_string_buffer(data, max(len(data), 1))
        data_out = ctypes.create_string_buffer(len(data) + _DATA_OUT_SLACK)
        if data:  # tracing programs take no data, only ctx
            opts.data_in = ctypes.addressof(data_in)
            opts.data_size_in = len(data)
            opts.data_out = ctypes.addressof(data_out)
            opts.data_size_out = len(data) + _DATA_OUT_SLACK
        ctx_out = None
        if ctx is not None:
            raw = bytes(ctx)
            ctx_in = ctypes.create_string_buffer(raw, len(raw))
            ctx_out = ctypes.create_string_buffer(len(raw))
            opts.ctx_in = ctypes.addressof(ctx_in)
            opts.ctx_size_in = len(raw)
            opts.ctx_out = ctypes.addressof(ctx_out)
            opts.ctx_size_out = len(raw)
        opts.repeat = repeat
        check_int(
            lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), f"test run of {self.name}"
        )
        out = data_out.raw[: opts.data_size_out] if data else b""
        ctx_bytes = ctx_out.raw[: opts.ctx_size_out] if ctx_out is not None else None
        return RunResult(retval=opts.retval, data=out, duration_ns=opts.duration, ctx=ctx_bytes)

    def attach(self) -> Link:
        """Attach the program where its ELF section says (`SEC("tp/syscalls/...")`,
        `SEC("kprobe/...")`, `SEC("uprobe//path:fn")`, ...), as libbpf's auto-attach
        does. The link is destroyed by `Link.close()` or when the object closes.
        Programs that need an interface (XDP, tc) are attached with ip/tc instead.
        """
        self._obj._check_open(f"program {self.name}")
        link = Link(self.name, check_ptr(lib.bpf_program__attach(self._ptr), f"attach {self.name}"))
        self._obj._links.append(link)
        return link

    def __repr__(self) -> str:
        return f"<Program {self.name} id={self.id} tag={self.tag} type={self.type}>"


class Link:
    """An attachment of a `Program` (a BPF link); a context manager."""

    def __init__(self, program: str, ptr: int) -> None:
        #: The attached program's name (a link does not keep its object alive).
        self.program = program
        self._ptr: int | None = ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Detach (idempotent)."""
        if self._ptr is not None:
            lib.bpf_link__destroy(self._ptr)
            self._ptr = None

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Link {self.program} {'closed' if self.closed else 'attached'}>"


class Map:
    """One map of a `BpfObject`. Keys and values: bytes, or int packed little-endian."""

    def __init__(self, obj: BpfObject, ptr: int) -> None:
        self._obj = obj
        self.name: str = lib.bpf_map__name(ptr).decode()
        self._fd: int = lib.bpf_map__fd(ptr)
        self.key_size: int = lib.bpf_map__key_size(ptr)
        self.value_size: int = lib.bpf_map__value_size(ptr)
        self.max_entries: int = lib.bpf_map__max_entries(ptr)
        self._type_id: int = lib.bpf_map__type(ptr)
        if self._type_id in _PERCPU_MAP_TYPES:
            ncpus = check_int(lib.libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")
            self._buf_size = (self.value_size + 7) // 8 * 8 * ncpus
        else:
            self._buf_size = self.value_size

    @property
    def fd(self) -> int:
        """The map's fd, owned by its object (do not close it)."""
        self._obj._check_open(f"map {self.name}")
        return self._fd

    def _pack(self, what: str, v: bytes | bytearray | int, size: int) -> Any:
        if isinstance(v, int):
            try:
                raw = v.to_bytes(size, "little", signed=v < 0)
            except OverflowError:
                raise ValueError(
                    f"map {self.name}: {what} {v} does not fit in {size} bytes"
                ) from None
        else:
            raw = bytes(v)
            if len(raw) != size:
                raise ValueError(
                    f"map {self.name}: {what} is {len(raw)} bytes, the map's is {size}"
                )
        return ctypes.create_string_buffer(raw, max(size, 1))

    def lookup(self, key: bytes | bytearray | int) -> bytes | None:
        """The value at `key`, or None if there is none."""
        k = self._pack("key", key, self.key_size)
        v = ctypes.create_string_buffer(max(self._buf_size, 1))
        ret = lib.bpf_map_lookup_elem(self.fd, k, v)
        if ret < 0:
            err = -ret if ret != -1 else ctypes.get_errno()
            if err == errno.ENOENT:
                return None
            check_int(ret, f"lookup in map {self.name}")
        return v.raw[: self._buf_size]

    def __getitem__(self, key: bytes | bytearray | int) -> bytes:
        value = self.lookup(key)
        if value is None:
            raise KeyError(key)
        return value

    def update(self, key: bytes | bytearray | int, value: bytes | bytearray | int) -> None:
        """Set `key` to `value` (creating it if needed)."""
        k = self._pack("key", key, self.key_size)
        v = self._pack("value", value, self._buf_size)
        check_int(lib.bpf_map_update_elem(self.fd, k, v, 0), f"update of map {self.name}")

    def delete(self, key: bytes | bytearray | int) -> bool:
        """Delete `key`; False if it was not there. Array maps cannot delete (EINVAL)."""
        k = self._pack("key", key, self.key_size)
        ret = lib.bpf_map_delete_elem(self.fd, k)
        if ret < 0 and (-ret if ret != -1 else ctypes.get_errno()) == errno.ENOENT:
            return False
        check_int(ret, f"delete from map {self.name}")
        return True

    def keys(self) -> Iterator[bytes]:
        """Every key, in the kernel's iteration order."""
        fd = self.fd
        cur = None
        nxt = ctypes.create_string_buffer(max(self.key_size, 1))
        while True:
            ret = lib.bpf_map_get_next_key(fd, cur, nxt)
            if ret < 0:
                if (-ret if ret != -1 else ctypes.get_errno()) == errno.ENOENT:
                    return
                check_int(ret, f"iteration of map {self.name}")
            key = nxt.raw[: self.key_size]
            yield key
            cur = ctypes.create_string_buffer(key, max(self.key_size, 1))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs as bytes; entries deleted meanwhile are skipped."""
        for key in self.keys():
            value = self.lookup(key)
            if value is not None:
                yield key, value

    def __repr__(self) -> str:
        sizes = f"key={self.key_size}B value={self.value_size}B max={self.max_entries}"
        return f"<Map {self.name} {sizes}>"


class BpfLoader:
    """Loads BPF objects and closes them all at once: the `bpf` fixture.

    A relative path is looked up under `base_dir` first (the fixture passes the
    test module's directory), then from the current directory.
    """

    def __init__(self, base_dir: str | os.PathLike[str] | None = None) -> None:
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._objects: list[BpfObject] = []

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """Where `path` is: itself if absolute, else beside the test module, else in the cwd.

        Raises BpfObjectNotFound naming every place it looked for a relative path.
        """
        p = Path(path)
        if p.is_absolute():
            return p  # a missing file is reported when it is opened
        tried = [(Path.cwd() / p, "working directory")]
        if self.base_dir is not None:
            tried.insert(0, (self.base_dir / p, "beside the test module"))
        for candidate, _ in tried:
            if candidate.exists():
                return candidate
        where = ", ".join(f"{c} ({why})" for c, why in tried)
        raise BpfObjectNotFound(
            errno.ENOENT, f"BPF object not found (build it first?); tried {where}", str(path)
        )

    def load(self, path: str | os.PathLike[str]) -> BpfObject:
        """Open and load a BPF ELF object; raises BpfLoadError with the verifier log."""
        obj = BpfObject(self.resolve(path))
        self._objects.append(obj)
        return obj

    def close(self) -> None:
        """Close every object this loader loaded (idempotent)."""
        while self._objects:
            self._objects.pop().close()

    def __enter__(self) -> BpfLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
