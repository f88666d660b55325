"""The maps of a loaded BPF object (`BpfObject.maps`, pytest_lbr.bpf): lookup, update,
delete and iteration through libbpf's map syscalls.

Keys and values are `bytes` of exactly the map's key/value size, or an `int`, packed
little-endian (the byte order of x86-64 and arm64) to that size. Values come back as
`bytes`; for per-CPU maps a lookup returns the values of every possible CPU back to
back, each padded to 8 bytes, as the kernel does.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Iterator
from typing import Any, Protocol

from pytest_lbr.bpf.libbpf import check_int, lib

__all__ = ["Map"]

# Map types whose values are per possible CPU (uapi enum bpf_map_type):
# PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE.
_PERCPU_MAP_TYPES = {5, 6, 10, 21}


class _Owner(Protocol):
    """What a map needs of its object (a `pytest_lbr.bpf.BpfObject`)."""

    def check_open(self, what: str) -> None: ...

    def _attach_struct_ops(self, bmap: Map) -> Any: ...


class Map:
    """One map of a `BpfObject`. Keys and values: bytes, or int packed little-endian."""

    def __init__(self, obj: _Owner, ptr: int) -> None:
        self._obj = obj
        self._ptr = ptr
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
        self._obj.check_open(f"map {self.name}")
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

    @property
    def type_id(self) -> int:
        """The map's type (uapi enum bpf_map_type: 1 hash, 2 array, 26 struct_ops, ...)."""
        return self._type_id

    def attach_struct_ops(self) -> Any:
        """Register a struct_ops map (`SEC(".struct_ops")` or `SEC(".struct_ops.link")`: a
        TCP congestion control written in BPF, ...) with the kernel, as a skeleton's
        `bpf_map__attach_struct_ops` does. It stays registered until the returned
        `pytest_lbr.bpf.Link` closes, or the object does. AttachError (one line) when
        the kernel refuses."""
        return self._obj._attach_struct_ops(self)

    def __repr__(self) -> str:
        sizes = f"key={self.key_size}B value={self.value_size}B max={self.max_entries}"
        return f"<Map {self.name} {sizes}>"
