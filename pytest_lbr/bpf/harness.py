"""Load BPF objects and run their programs: the object behind the `bpf` fixture.

    loader = BpfLoader()
    obj = loader.load("tests/bpf/build/xdp_helpers.bpf.o")
    prog = obj.programs["xdp_helpers"]
    res = prog.run(data=packet)            # BPF_PROG_TEST_RUN
    obj.maps["counts"].lookup(0x45)        # -> bytes | None
    link = prog.attach_xdp("eth0", mode="driver")   # on a real interface
    link.fd                                # the kernel BPF link's fd
    link.close()                           # detached (idempotent)
    obj.programs["dump_task"].iterate()    # SEC("iter/task"): what it wrote, as bytes
    loader.written                         # what each program was loaded from
    loader.close()                         # closes every object it loaded

Map keys and values are `bytes` of exactly the map's key/value size, or an
`int`, packed little-endian (the byte order of x86-64 and arm64) to that size.
Values come back as `bytes`; for per-CPU maps a lookup returns the values of
every possible CPU back to back, each padded to 8 bytes, as the kernel does.

Every kernel handle is a context manager with `close()`, backed by
`weakref.finalize`; programs and maps keep their object alive. This module holds the
objects and programs; `pytest_lbr.bpf` exports its public names (the package's
docstring lists the rest of it).
"""

from __future__ import annotations

import ctypes
import errno
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from pytest_lbr.bpf.attach import FdLink, prepare_sections
from pytest_lbr.bpf.libbpf import (
    BpfError,
    lib,
    libbpf_messages,
)
from pytest_lbr.bpf.links import (
    TC_DIRECTIONS,
    AttachError,
    Link,
    NoLinkFd,
    PerCpuLink,
    SockmapLink,
    TcLink,
    XdpLink,
    last_message,
)
from pytest_lbr.bpf.maps import Map
from pytest_lbr.bpf.program import PERF_EVENTS, PERMISSION, ROOT_HINT, XDP_MODES, Program, RunResult
from pytest_lbr.errors import UserError
from pytest_lbr.programs.written import WrittenPrograms

__all__ = [
    "TC_DIRECTIONS",
    "XDP_MODES",
    "AttachError",
    "BpfLoadError",
    "BpfLoader",
    "BpfObject",
    "BpfObjectNotFound",
    "FdLink",
    "Link",
    "Map",
    "NoLinkFd",
    "NotABpfObject",
    "PERF_EVENTS",
    "PerCpuLink",
    "Program",
    "RunResult",
    "SockmapLink",
    "TcLink",
    "XdpLink",
]

_ELF_MAGIC = b"\x7fELF"
_EM_BPF = 247

_T = TypeVar("_T")

_STRUCT_OPS_MAP = 26  # uapi enum bpf_map_type: BPF_MAP_TYPE_STRUCT_OPS

#: A hook run right after libbpf loads an object (its `bpf_object *` and path):
#: program name -> the instructions that program now runs, for any it replaced.
AfterLoad = Callable[[int, Path], Mapping[str, bytes]]


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


#: Why `Program.iterate` may fail, by errno, and what to do.
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
    that nothing else holds. Its programs add what they were loaded from to
    `written` (its loader's book; a book of its own when none is given).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        after_load: AfterLoad | None = None,
        written: WrittenPrograms | None = None,
    ) -> None:
        self.path = Path(path)
        #: prog id -> what each of its programs was loaded from (`WrittenPrograms`).
        self.written = written if written is not None else WrittenPrograms()
        self._ptr = _open_and_load(self.path)
        # Exact coverage puts counted programs in place of the loaded ones here.
        running = after_load(self._ptr, self.path) if after_load is not None else {}
        #: Links made by `Program.attach()`: destroyed before the object closes.
        self._links: list[Link] = []
        #: `on_close` callbacks: run first when the object closes.
        self._on_close: list[Callable[[], None]] = []
        self._finalizer = weakref.finalize(
            self, _close_object, self._ptr, self._links, self._on_close
        )
        progs: dict[str, Program] = {}
        p = lib.bpf_object__next_program(self._ptr, None)
        while p:
            prog = Program(self, p, running.get(lib.bpf_program__name(p).decode()))
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

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the object closes, before its programs go.

        The tracer keeps each traced program's hook (a BPF link that holds the
        program) for as long as the program is open, and lets it go here, so a
        closed object leaves nothing behind. A callback's error does not stop
        the others or the close.
        """
        self.check_open("on_close")
        self._on_close.append(callback)

    def _attach_struct_ops(self, bmap: Map) -> Link:
        """`Map.attach_struct_ops`: the link is closed with the object."""
        self.check_open(f"map {bmap.name}")
        what = f"cannot register struct_ops map {bmap.name}"
        if bmap.type_id != _STRUCT_OPS_MAP:
            raise AttachError(
                errno.EINVAL,
                what,
                'it is not a struct_ops map (a variable in SEC(".struct_ops") or '
                'SEC(".struct_ops.link") makes one)',
            )
        with libbpf_messages() as log:
            ptr = lib.bpf_map__attach_struct_ops(bmap._ptr)
            err = ctypes.get_errno() or errno.EINVAL
        if not ptr:
            hint = ROOT_HINT if err in PERMISSION else last_message(log)
            if err == errno.EEXIST:
                hint = "one of that name is registered already (a TCP congestion control's name is global)"
            raise AttachError(err, what, hint)
        link = Link(bmap.name, ptr)
        self._links.append(link)
        return link

    def keep_link(self, link: Link) -> None:
        """Close `link` with the object (a program's `attach_*`)."""
        self._links.append(link)

    def check_open(self, what: str) -> None:
        """Raise ValueError naming `what` if the object is closed."""
        if self.closed:
            raise ValueError(f"{what}: {self.path.name} is closed")

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"programs={list(self.programs)}"
        return f"<BpfObject {self.path} {state}>"


def _close_object(ptr: int, links: list[Link], on_close: list[Callable[[], None]]) -> None:
    failed: list[Exception] = []
    for callback in on_close:
        try:
            callback()
        except Exception as exc:  # the links and the object still go
            failed.append(exc)
    for link in links:
        try:
            link.close()
        except Exception as exc:  # the other links and the object still go
            failed.append(exc)
    lib.bpf_object__close(ptr)
    if failed:
        raise failed[0]


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
        prepare_sections(ptr)  # SEC("netfilter"), SEC("tcx/ingress") with libbpf 1.1
        ret = lib.bpf_object__load(ptr)
        if ret < 0:
            lib.bpf_object__close(ptr)
            raise BpfLoadError(-ret, f"cannot load BPF object {shown}", "".join(log))
    return int(ptr)


class BpfLoader:
    """Loads BPF objects and closes them all at once: the `bpf` fixture.

    A relative path is looked up under `base_dir` first (the fixture passes the
    test module's directory), then from the current directory. `written`: the book
    its programs add what they were loaded from to (a new one when None); hand it to
    `Tracer(written=...)` so traces describe their helper calls as the C wrote them.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        after_load: AfterLoad | None = None,
        written: WrittenPrograms | None = None,
    ) -> None:
        self.base_dir = Path(base_dir) if base_dir is not None else None
        #: Run on each object right after it loads (exact coverage's counters).
        self.after_load = after_load
        #: prog id -> what each program it loaded was loaded from (`WrittenPrograms`).
        self.written = written if written is not None else WrittenPrograms()
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
        obj = BpfObject(self.resolve(path), self.after_load, self.written)
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
