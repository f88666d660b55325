"""Resolve BPF program targets (fd, id, name, tag, pin) to live kernel programs.

`resolve_program(target)` turns a parsed "prog" `Target` into a `ProgramRef`
that owns its own fd (so the program stays loaded while it is traced) and
knows the names the kernel shows for it: `ksym` as in /proc/kallsyms and the
BTF names of its functions (main program first, then subprograms).
`list_programs()` describes every loaded program.

Every failure is a `TargetError` whose message is one actionable line.
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from pytest_lbr.bpf.libbpf import BpfError, check_int, lib
from pytest_lbr.model import KERNEL_NAME_MAX
from pytest_lbr.programs.info import Btf, open_program, program_details, program_ids
from pytest_lbr.targets import Target, TargetError, parse_target

__all__ = ["ProgramInfo", "ProgramRef", "jited_ranges", "list_programs", "resolve_program"]

# How many candidate names an error message lists before "...".
_LIST_MAX = 12


@dataclass
class ProgramInfo:
    """What the kernel tells about one loaded BPF program.

    `name` is the kernel's (at most 15 bytes); `functions` are the BTF names
    of the program's functions, main program first (empty without BTF);
    `ksym` is the main program's symbol in /proc/kallsyms,
    ``bpf_prog_<tag>_<name>``; `ksyms` has one symbol per function.
    `type` is libbpf's name of the program type ("xdp", "tracing", ...).
    """

    id: int
    name: str
    tag: str
    type: str
    type_id: int
    ksym: str
    ksyms: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()

    @property
    def display_name(self) -> str:
        """The full function name when BTF has it, else the kernel's name."""
        return self.functions[0] if self.functions else self.name


@dataclass(eq=False)
class ProgramRef(ProgramInfo):
    """A live BPF program: `ProgramInfo` plus an fd this object owns.

    Close it (or use it as a context manager) to drop the reference; a
    forgotten ref is closed by a `weakref.finalize` backstop.
    """

    fd: int = -1
    _finalizer: weakref.finalize | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.fd >= 0:
            self._finalizer = weakref.finalize(self, os.close, self.fd)

    def close(self) -> None:
        """Close the owned fd (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()
        self.fd = -1

    def __enter__(self) -> ProgramRef:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(fd: int) -> ProgramInfo:
    """ProgramInfo for a program fd (raises BpfError)."""
    d = program_details(fd)
    with Btf(d.btf_id) as btf:
        names = [btf.name(t) for t in d.func_types]
    # BTF gone or unreadable: names are a nicety, not a requirement.
    functions = tuple(n or "" for n in names) if all(n is not None for n in names) else ()
    # The kernel names a JITed program after its BTF function when it has one,
    # else after its (truncated) name: kernel/bpf/core.c bpf_get_prog_name().
    main = functions[0] if functions else d.name
    ksym = f"bpf_prog_{d.tag}_{main}" if main else f"bpf_prog_{d.tag}"
    # Subprograms get their own tag and symbol; the main program's symbol
    # uses the program's tag (tags[0] is func[0]'s, which kallsyms never shows).
    ksyms: tuple[str, ...] = (ksym,)
    if len(d.tags) > 1 and len(d.tags) == len(functions):
        ksyms += tuple(f"bpf_prog_{t}_{f}" for t, f in zip(d.tags[1:], functions[1:], strict=True))
    return ProgramInfo(
        id=d.id,
        name=d.name,
        tag=d.tag,
        type=d.type,
        type_id=d.type_id,
        ksym=ksym,
        ksyms=ksyms,
        functions=functions,
    )


def _ref(fd: int, spec: str) -> ProgramRef:
    """A ProgramRef owning `fd` (closed on failure)."""
    try:
        pi = _describe(fd)
    except BpfError as exc:
        os.close(fd)
        raise TargetError(f"{spec}: cannot read the program's info: {exc.strerror}") from None
    return ProgramRef(fd=fd, **{k: getattr(pi, k) for k in ProgramInfo.__dataclass_fields__})


def _fd_kind(fd: int) -> str:
    """What an fd is: "anon_inode:bpf-prog" for a program, "anon_inode:bpf-map" ..."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _ids() -> Iterator[int]:
    try:
        yield from program_ids()
    except BpfError as exc:
        raise TargetError(
            f"listing BPF programs failed: {exc.strerror} (it needs root: CAP_SYS_ADMIN)"
        ) from None


def _open_id(prog_id: int, spec: str) -> int:
    try:
        return open_program(prog_id)
    except BpfError as exc:
        if exc.errno == errno.ENOENT:
            raise TargetError(
                f"{spec}: no BPF program with id {prog_id} is loaded (see bpftool prog)"
            ) from None
        if exc.errno == errno.EPERM:
            raise TargetError(
                f"{spec}: opening BPF program {prog_id} needs root (CAP_SYS_ADMIN)"
            ) from None
        raise TargetError(f"{spec}: cannot open BPF program {prog_id}: {exc.strerror}") from None


def _each_program() -> Iterator[tuple[int, ProgramInfo]]:
    """(fd, info) for every loaded program; the caller owns (and closes) each fd."""
    for prog_id in _ids():
        try:
            fd = open_program(prog_id)
        except BpfError:  # unloaded since we saw its id
            continue
        try:
            pi = _describe(fd)
        except BpfError:
            os.close(fd)
            continue
        yield fd, pi


def list_programs() -> list[ProgramInfo]:
    """Every loaded BPF program, by increasing id (needs root)."""
    out = []
    for fd, pi in _each_program():
        os.close(fd)
        out.append(pi)
    return out


def _names_match(pi: ProgramInfo, name: str) -> bool:
    if name in (pi.name, pi.display_name):
        return True
    # Without BTF the kernel only knows the first 15 bytes of a long name.
    return len(name) > KERNEL_NAME_MAX and name[:KERNEL_NAME_MAX] == pi.name


def _pick_many_error(spec: str, what: str, ids: list[int]) -> TargetError:
    listed = ", ".join(str(i) for i in ids)
    return TargetError(
        f"{spec}: {len(ids)} loaded BPF programs have this {what} (ids {listed}); "
        "pass one as 'prog:ID'"
    )


def _by(spec: str, what: str, value: str) -> ProgramRef:
    found: list[tuple[int, ProgramInfo]] = []
    seen: list[ProgramInfo] = []
    try:
        for fd, pi in _each_program():
            hit = _names_match(pi, value) if what == "name" else pi.tag == value
            if hit:
                found.append((fd, pi))
            else:
                os.close(fd)
                seen.append(pi)
        if len(found) == 1:
            return _ref(found.pop()[0], spec)
        if found:
            raise _pick_many_error(spec, what, [pi.id for _, pi in found])
    finally:
        for fd, _ in found:
            os.close(fd)
    if not seen:
        raise TargetError(f"{spec}: no BPF program is loaded at all")
    names = sorted({p.display_name if what == "name" else p.tag for p in seen})
    shown = ", ".join(names[:_LIST_MAX]) + (", ..." if len(names) > _LIST_MAX else "")
    raise TargetError(f"{spec}: no loaded BPF program has this {what}; loaded: {shown}")


def _from_fd(fd: int, spec: str) -> ProgramRef:
    kind = _fd_kind(fd)
    if not kind:
        raise TargetError(f"{spec}: fd {fd} is not open in this process")
    if kind != "anon_inode:bpf-prog":
        raise TargetError(f"{spec}: fd {fd} is not a BPF program (it is {kind})")
    return _ref(os.dup(fd), spec)


def _from_pin(path: str, spec: str) -> ProgramRef:
    try:
        fd = check_int(lib.bpf_obj_get(os.fsencode(path)), f"bpf_obj_get({path})")
    except BpfError as exc:
        err = exc.errno or errno.EPERM
        if err == errno.ENOENT:
            raise TargetError(
                f"{spec}: nothing is pinned at {path} (is bpffs mounted there?)"
            ) from None
        raise TargetError(f"{spec}: cannot open pinned object {path}: {os.strerror(err)}") from None
    kind = _fd_kind(fd)
    if kind != "anon_inode:bpf-prog":
        os.close(fd)
        what = kind.removeprefix("anon_inode:") or "not a program"
        raise TargetError(f"{spec}: {path} is pinned but is not a BPF program ({what})")
    return _ref(fd, spec)


def resolve_program(target: Target | object) -> ProgramRef:
    """The live program a "prog" target names, with its own fd (close it when done).

    Accepts a parsed `Target` or anything `parse_target` accepts.
    """
    t = target if isinstance(target, Target) else parse_target(target)
    if not t.is_program:
        raise TargetError(f"{t.spec}: not a BPF program target (kind {t.kind!r})")
    if t.prog_fd is not None:
        return _from_fd(t.prog_fd, t.spec)
    if t.prog_id is not None:
        return _ref(_open_id(t.prog_id, t.spec), t.spec)
    if t.prog_name is not None:
        return _by(t.spec, "name", t.prog_name)
    if t.prog_tag is not None:
        return _by(t.spec, "tag", t.prog_tag.lower())
    if t.pin_path is not None:
        return _from_pin(t.pin_path, t.spec)
    raise TargetError(f"{t.spec}: a prog target needs an fd, id, name, tag or pinned path")


def jited_ranges(fd: int) -> list[tuple[int, int]]:
    """[start, end) of each JITed function of the program behind `fd` (empty if not JITed)."""
    try:
        return [(start, start + n) for start, n in program_details(fd).functions]
    except BpfError:
        return []  # the names still identify the program
