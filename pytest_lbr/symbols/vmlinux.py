"""The debug vmlinux: finding it, trusting it (build-id) and asking it for source lines.

`VmlinuxLines(path).lookup(addrs)` answers with llvm-symbolizer-style frames for
ELF addresses (no KASLR): from the on-disk cache first, then llvm-symbolizer
when installed (measured ~20x faster than pyelftools on a cold vmlinux; see
bench/RESULTS-symbolize.md), else pyelftools, one compile unit at a time.
Both paths give the same frames (tests/symbols/test_vmlinux.py).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import struct
import subprocess
import time
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING

from ..progress import progress
from .cache import FrameCache, FrameTable, cache_dir, gc_paused
from .frame import Frame

if TYPE_CHECKING:  # pyelftools is imported where an ELF file is read (a slow import)
    from elftools.elf.elffile import ELFFile

    from .dwarf import DwarfLines

__all__ = [
    "VmlinuxError",
    "VmlinuxLines",
    "VmlinuxMismatch",
    "candidate_paths",
    "elf_build_id",
    "fetched_path",
    "find_vmlinux",
    "running_build_id",
    "sample_text_addresses",
]

_NT_GNU_BUILD_ID = 3
_LLVM_NAMES = ("llvm-symbolizer", "llvm-symbolizer-19", "llvm-symbolizer-16", "llvm-symbolizer-14")


class VmlinuxError(Exception):
    """A vmlinux file that cannot be used; str() is one line saying why."""


class VmlinuxMismatch(VmlinuxError):
    """A vmlinux built from another kernel than the one running."""


def parse_build_id(notes: bytes) -> str | None:
    """The GNU build-id in a raw ELF notes blob (e.g. /sys/kernel/notes), as hex."""
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
        pos += 12
        name = notes[pos : pos + namesz]
        pos += (namesz + 3) & ~3
        desc = notes[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        if ntype == _NT_GNU_BUILD_ID and name.rstrip(b"\0") == b"GNU":
            return desc.hex()
    return None


def running_build_id(notes_path: str = "/sys/kernel/notes") -> str | None:
    """The running kernel's build-id, or None when /sys/kernel/notes is unreadable."""
    try:
        with open(notes_path, "rb") as f:
            return parse_build_id(f.read())
    except OSError:
        return None


def _open_elf(path: str) -> tuple[object, ELFFile]:
    """Open an ELF file or raise VmlinuxError with one clear line."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        f = open(path, "rb")  # noqa: SIM115 -- the ELFFile reads lazily
    except OSError as exc:
        raise VmlinuxError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        elf = ELFFile(f)
        size = os.fstat(f.fileno()).st_size
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOBITS" and sec["sh_offset"] + sec["sh_size"] > size:
                raise VmlinuxError(
                    f"{path}: truncated ELF file ({size} bytes; section {sec.name} "
                    f"needs {sec['sh_offset'] + sec['sh_size']})"
                )
    except VmlinuxError:
        f.close()
        raise
    except (ELFError, struct.error, ValueError, OSError) as exc:
        f.close()
        raise VmlinuxError(f"{path}: not a usable ELF file ({exc})") from None
    return f, elf


def elf_build_id(path: str) -> str | None:
    """The GNU build-id of an ELF file, as hex; raises VmlinuxError if not ELF.

    A 64-bit little-endian file is read with struct from its section headers:
    every session's first symbolization asks this of a debug vmlinux, and
    pyelftools builds an object for each of its hundreds of sections first. Any
    other file, and any section the file is too short for, take pyelftools' path
    (and its error message).
    """
    try:
        with open(path, "rb") as raw:
            read, found = _raw_build_id(raw.fileno(), os.fstat(raw.fileno()).st_size)
    except OSError as exc:
        raise VmlinuxError(f"{path}: cannot open: {exc.strerror}") from None
    if read:
        return found
    f, elf = _open_elf(path)
    try:
        return _elf_build_id(elf)
    finally:
        f.close()  # type: ignore[attr-defined]


_SHT_NOTE, _SHT_NOBITS = 7, 8
#: `_raw_build_id`'s answer for a file it leaves to pyelftools.
_UNUSUAL: tuple[bool, str | None] = (False, None)


def _raw_build_id(fd: int, size: int) -> tuple[bool, str | None]:
    """(True, build-id or None when it has none) of the 64-bit little-endian ELF file
    `fd` of `size` bytes, from its SHT_NOTE sections; `_UNUSUAL` for any other."""
    head = os.pread(fd, 64, 0)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01":
        return _UNUSUAL
    shoff = struct.unpack_from("<Q", head, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    if shentsize != 64 or shnum == 0 or shoff + 64 * shnum > size:
        return _UNUSUAL
    table = os.pread(fd, 64 * shnum, shoff)
    notes: list[tuple[int, int]] = []
    for i in range(shnum):
        kind, _, _, offset, length = struct.unpack_from("<4xIQQQQ", table, 64 * i)
        if kind != _SHT_NOBITS and offset + length > size:
            return _UNUSUAL  # truncated: pyelftools names the section
        if kind == _SHT_NOTE:
            notes.append((offset, length))
    for offset, length in notes:
        bid = parse_build_id(os.pread(fd, length, offset))
        if bid:
            return True, bid
    return True, None


def _extent(section: object) -> tuple[int, int]:
    return section["sh_offset"], section["sh_size"]  # type: ignore[index]


def _elf_build_id(elf: ELFFile) -> str | None:
    for sec in elf.iter_sections():
        if sec["sh_type"] == "SHT_NOTE":
            bid = parse_build_id(sec.data())
            if bid:
                return bid
    return None


def candidate_paths(release: str | None = None) -> list[str]:
    """Where a debug vmlinux for `release` may be, in retsnoop's order, then our cache."""
    r = release or os.uname().release
    return [
        f"/boot/vmlinux-{r}",
        f"/lib/modules/{r}/vmlinux-{r}",
        f"/lib/modules/{r}/build/vmlinux",
        f"/usr/lib/modules/{r}/kernel/vmlinux",
        f"/usr/lib/debug/boot/vmlinux-{r}",
        f"/usr/lib/debug/lib/modules/{r}/vmlinux",
        str(fetched_path(r)),
    ]


def fetched_path(release: str, base: Path | None = None) -> Path:
    """Where `pytest-lbr fetch-vmlinux` puts the debug vmlinux of `release`: the
    package's own path under `base` (default: the cache's dbg/), searched last."""
    base = base or cache_dir() / "dbg"
    return base / "usr" / "lib" / "debug" / "boot" / f"vmlinux-{release}"


def check_matches_running(path: str, notes_path: str = "/sys/kernel/notes") -> str:
    """Return the build-id of `path` if it is the running kernel's, else raise.

    VmlinuxMismatch names both ids, so a user sees which file belongs to which build.
    """
    want = running_build_id(notes_path)
    have = elf_build_id(path)
    if want is None:
        raise VmlinuxMismatch(f"{path}: cannot read the running kernel's build-id ({notes_path})")
    if have is None:
        raise VmlinuxMismatch(
            f"{path}: has no GNU build-id, so it cannot be matched with the running kernel's "
            f"build-id {want}: not using it for file:line"
        )
    if have != want:
        raise VmlinuxMismatch(
            f"{path}: build-id {have} does not match the running kernel's "
            f"build-id {want}: not using it for file:line"
        )
    return have


def find_vmlinux(explicit: str | None = None) -> tuple[str | None, str]:
    """A debug vmlinux matching the running kernel, and a status line saying what happened."""
    paths = [explicit] if explicit else candidate_paths()
    reasons: list[str] = []
    for p in paths:
        if not explicit and not os.path.exists(p):
            continue
        try:
            bid = check_matches_running(p)
        except VmlinuxError as exc:
            reasons.append(str(exc))
            continue
        return p, f"vmlinux {p} (build-id {bid})"
    if not reasons:
        return None, "no debug vmlinux found (looked in " + ", ".join(
            paths
        ) + "): no kernel file:line"
    return None, "; ".join(reasons)


def _llvm_symbolizer() -> str | None:
    if os.environ.get("PYTEST_LBR_NO_LLVM_SYMBOLIZER"):
        return None
    for name in _LLVM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


#: Seconds between two saves of the line cache by one VmlinuxLines (see _save_soon).
SAVE_INTERVAL = 5.0


class VmlinuxLines:
    """Source frames for ELF addresses of one vmlinux (any kernel: offline use is fine).

    `use_llvm`: None = use llvm-symbolizer when installed, False = pyelftools only.
    `cache`: keep results on disk keyed by build-id (a second session starts warm).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        use_llvm: bool | None = None,
        cache: bool = True,
        cache_directory: Path | None = None,
    ) -> None:
        self.path = os.fspath(path)
        f, elf = _open_elf(self.path)
        try:
            self.build_id = _elf_build_id(elf) or ""
            if elf.get_section_by_name(".debug_info") is None:
                raise VmlinuxError(f"{self.path}: no DWARF (.debug_info): not a debug vmlinux")
            self.machine = elf["e_machine"]
            symtab = elf.get_section_by_name(".symtab")
            # Where the symbol table is; read only when needed (a warm session never does).
            self._symtab_at = (
                (
                    symtab["sh_offset"],
                    symtab["sh_size"],
                    *_extent(elf.get_section(symtab["sh_link"])),
                )
                if symtab
                else None
            )
            self._symtab_data: tuple[bytes, bytes] | None = None
        finally:
            f.close()  # type: ignore[attr-defined]
        self._llvm = _llvm_symbolizer() if use_llvm is not False else None
        self._dwarf: DwarfLines | None = None
        self._funcs: tuple[list[int], list[int], list[str]] | None = None
        self._cache = (
            FrameCache(self.build_id, cache_directory) if cache and self.build_id else None
        )
        self._table: FrameTable | None = None  # the disk cache, read on first lookup
        self._found: dict[int, tuple[Frame, ...]] = {}  # symbolized by this object
        self._pending = False  # _found holds results not saved yet
        self._saved_at: float | None = None  # monotonic time of the last save
        self._flush_at_exit: weakref.finalize | None = None
        #: llvm-symbolizer processes started so far (several: each from a thread of its
        #: own): forks of this process, which a trace's notes name (`Tracer.trace`).
        self.processes_started = 0

    # -- symbols ----------------------------------------------------------------

    @property
    def _symtab_raw(self) -> tuple[bytes, bytes] | None:
        if self._symtab_data is None and self._symtab_at is not None:
            sym_off, sym_size, str_off, str_size = self._symtab_at
            with open(self.path, "rb") as f:
                f.seek(sym_off)
                data = f.read(sym_size)
                f.seek(str_off)
                self._symtab_data = (data, f.read(str_size))
        return self._symtab_data

    def functions(self) -> tuple[list[int], list[int], list[str]]:
        """FUNC symbols of the ELF symbol table: sorted starts, sizes, names.

        VmlinuxError (one line, with the fix) when the symbol table is damaged.
        """
        with self._damage_is_one_line():
            return self._functions()

    def _functions(self) -> tuple[list[int], list[int], list[str]]:
        if self._funcs is None:
            starts: list[int] = []
            sizes: list[int] = []
            names: list[str] = []
            raw = self._symtab_raw
            if raw is not None:
                data, strtab = raw
                syms = []
                for name, info, _o, shndx, value, size in struct.iter_unpack("<IBBHQQ", data):
                    if info & 0xF == 2 and shndx != 0 and value:  # STT_FUNC, defined
                        syms.append((value, size, name))
                syms.sort()
                for value, size, name in syms:
                    end = strtab.index(b"\0", name)
                    starts.append(value)
                    sizes.append(size)
                    names.append(strtab[name:end].decode("utf-8", "replace"))
            self._funcs = (starts, sizes, names)
        return self._funcs

    def symbol_address(self, name: str) -> int | None:
        """The address of a symbol (any type) in the ELF symbol table."""
        with self._damage_is_one_line():
            return self._symbol_address(name)

    def _symbol_address(self, name: str) -> int | None:
        raw = self._symtab_raw
        if raw is None:
            return None
        data, strtab = raw
        key = b"\0" + name.encode() + b"\0"
        want: set[int] = set()
        pos = strtab.find(key)
        while pos >= 0:
            want.add(pos + 1)
            pos = strtab.find(key, pos + 1)
        for st_name, _i, _o, shndx, value, _s in struct.iter_unpack("<IBBHQQ", data):
            if st_name in want and shndx != 0:
                return int(value)
        return None

    def function_at(self, addr: int) -> tuple[str, int] | None:
        """(name, offset) of the ELF function symbol containing `addr`."""
        starts, sizes, names = self.functions()
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= starts[i] + max(sizes[i], 1):
            return None
        return names[i], addr - starts[i]

    # -- lines -------------------------------------------------------------------

    @contextlib.contextmanager
    def _damage_is_one_line(self) -> Iterator[None]:
        """Turn what a damaged file makes the readers raise into one VmlinuxError
        naming the file and the fix (pyelftools and struct trust every size in it)."""
        from .dwarf import DwarfError

        try:
            yield
        except VmlinuxError:
            raise
        except (DwarfError, struct.error, ValueError, IndexError, OSError) as exc:
            detail = str(exc) if isinstance(exc, DwarfError) else f"{self.path}: {exc!r}"
            raise VmlinuxError(
                f"{' '.join(detail.split())[:300]}: this debug vmlinux is damaged or "
                f"unreadable; replace it (delete it, then pytest-lbr fetch-vmlinux, or "
                f"reinstall the kernel's -dbg package)"
            ) from None

    def lookup(self, addrs: Iterable[int]) -> dict[int, tuple[Frame, ...]]:
        """Frames (innermost first) for ELF addresses; () where DWARF has nothing.

        VmlinuxError (one line naming the file and the fix) when the file's DWARF
        or symbol table is damaged.
        """
        with self._damage_is_one_line():
            return self._lookup(addrs)

    def _lookup(self, addrs: Iterable[int]) -> dict[int, tuple[Frame, ...]]:
        if self._table is None:
            self._table = self._cache.table() if self._cache else FrameTable()
        with gc_paused():
            wanted = set(addrs)
            out = self._table.select(wanted)
            if len(out) == len(wanted):
                return out  # all from the disk cache: the warm path
            rest = wanted.difference(out)
            missing = sorted(rest.difference(self._found))
        if missing:
            found = self._llvm_lookup(missing) if self._llvm else self._dwarf_lookup(missing)
            self._found.update(found)
            self._pending = True
            self._save_soon()
        with gc_paused():
            out.update(zip(rest, map(self._found.__getitem__, rest), strict=True))
        return out

    def _dwarf_lookup(self, addrs: list[int]) -> dict[int, tuple[Frame, ...]]:
        from .dwarf import DwarfError, DwarfLines

        if self._dwarf is None:
            self._dwarf = DwarfLines(self.path)
        dw = self._dwarf
        out: dict[int, tuple[Frame, ...]] = {}
        t0 = last = time.monotonic()
        for n, a in enumerate(addrs):
            try:
                frames = dw.frames(a)
            except DwarfError:
                frames = ()  # a damaged unit: no line for this address, the others still
            # llvm-symbolizer names the outermost frame after the ELF symbol
            # (`foo.isra.0`, `foo.cold`): so do we, so both paths agree.
            sym = self.function_at(a)
            if frames and sym is not None:
                frames = (*frames[:-1], frames[-1]._replace(function=sym[0]))
            out[a] = frames
            now = time.monotonic()
            if now - last > 2.0:
                last = now
                progress(
                    f"reading DWARF of {os.path.basename(self.path)}: "
                    f"{n + 1}/{len(addrs)} addresses, {now - t0:.0f} s"
                )
        return out

    def _llvm_lookup(self, addrs: list[int]) -> dict[int, tuple[Frame, ...]]:
        from .dwarf import kernel_relative

        assert self._llvm is not None
        if len(addrs) > 20000:
            progress(
                f"symbolizing {len(addrs)} addresses of "
                f"{os.path.basename(self.path)} with llvm-symbolizer"
            )
        # Sorted addresses split into contiguous chunks touch mostly disjoint
        # compile units, so one llvm-symbolizer per CPU divides the work.
        jobs = max(1, min(os.cpu_count() or 1, 4, len(addrs) // 5000))
        size = -(-len(addrs) // jobs)
        chunks = [addrs[i : i + size] for i in range(0, len(addrs), size)]
        self.processes_started += len(chunks)
        if len(chunks) == 1:  # no thread to wait for it: one fork of this process, not two
            results = [self._llvm_run(chunks[0])]
        else:
            with ThreadPoolExecutor(len(chunks)) as pool:
                results = list(pool.map(self._llvm_run, chunks))
        blocks = [b for r in results if r is not None for b in r]
        if any(r is None for r in results):
            # A broken llvm-symbolizer: pyelftools gives the same answers.
            self._llvm = None
            return self._dwarf_lookup(addrs)
        out: dict[int, tuple[Frame, ...]] = {}
        for a, block in zip(addrs, blocks, strict=False):
            lines = block.split("\n")
            frames = []
            for i in range(0, len(lines) - 1, 2):
                fn = lines[i]
                file, _, rest = lines[i + 1].rpartition(":")  # drop the column
                file, _, line = file.rpartition(":")
                fname = None if fn == "??" else fn
                path = None if file in ("", "??") else kernel_relative(file)
                if fname is None and path is None:
                    continue
                frames.append(Frame(fname, path, int(line) if line.isdigit() else 0))
            out[a] = tuple(frames)
        return out

    def _llvm_run(self, addrs: list[int]) -> list[str] | None:
        """One llvm-symbolizer's output blocks for `addrs`, or None if it failed."""
        assert self._llvm is not None
        # The plain output parses faster than --output-style=JSON (measured 4.0 s
        # vs 5.3 s for 100,000 addresses): "function\nfile:line:column\n" per
        # frame, a blank line after each address.
        res = subprocess.run(
            [self._llvm, f"--obj={self.path}", "--inlining", "--functions=linkage"],
            input="\n".join(f"{a:#x}" for a in addrs),
            capture_output=True,
            text=True,
            check=False,
        )
        blocks = res.stdout.split("\n\n")
        if res.returncode != 0 or len(blocks) < len(addrs):
            return None
        return blocks[: len(addrs)]

    def _save_soon(self) -> None:
        """Write new results to the disk cache now, or within SAVE_INTERVAL.

        A save merges the whole file (0.4 s for 100,000 cached addresses), so a
        session that symbolizes a trace per test saves at most every SAVE_INTERVAL
        seconds, and what is left when it ends is saved then (at close or exit).
        """
        if self._cache is None:
            return
        now = time.monotonic()
        if self._saved_at is None or now - self._saved_at >= SAVE_INTERVAL:
            self.flush()
        elif self._flush_at_exit is None:
            # Holds the cache and the results, not self: runs when self is
            # collected or at interpreter exit, whichever comes first.
            self._flush_at_exit = weakref.finalize(self, self._cache.save, self._found)

    def flush(self) -> None:
        """Save to the disk cache whatever this object has symbolized and not saved."""
        if self._cache is not None and self._pending:
            self._cache.save(self._found)
            self._saved_at = time.monotonic()
        self._pending = False
        if self._flush_at_exit is not None:
            self._flush_at_exit.detach()
            self._flush_at_exit = None

    def close(self) -> None:
        """Save what is pending and release the DWARF reader."""
        self.flush()
        if self._dwarf is not None:
            self._dwarf.close()
            self._dwarf = None


def sample_text_addresses(
    vm: VmlinuxLines, n: int, seed: int, functions: int | None = None
) -> list[int]:
    """`n` reproducible addresses inside functions of .text (for tests and benchmarks).

    With `functions`, the addresses fall in that many random functions only,
    so a pyelftools run decodes a bounded number of compile units.
    """
    starts, sizes, names = vm.functions()
    rnd = Random(seed)
    pool = [i for i in range(len(starts)) if sizes[i] > 0 and not names[i].startswith("__pfx_")]
    if functions is not None:
        pool = rnd.sample(pool, functions)
    out = []
    for _ in range(n):
        i = rnd.choice(pool)
        out.append(starts[i] + rnd.randrange(sizes[i]))
    return out
