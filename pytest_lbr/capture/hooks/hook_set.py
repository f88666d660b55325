"""Attach the LBR tracer (bpf/lbr_tracer.bpf.c) at every target and read its hits.

`HookSet(targets, snapshot=...)` loads the tracer once for the kprobe,
kprobe.multi, tracepoint and uprobe kinds, and once more per fentry/fexit
target (their attach target is fixed at load time). Every object of a set shares
the first one's ring buffer, per-CPU snapshot slots, lost counter and armed switch
through reused map fds; the large maps may come from a session's spare sets
(`capture/hooks/tracer_maps.py`). Nothing is pinned; `close()` releases every link and object, also when
attaching fails half way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from ctypes import c_char_p, c_uint32, c_uint64
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from pytest_lbr.bpf.libbpf import (
    BpfError,
    KprobeMultiOpts,
    KprobeOpts,
    ObjectOpenOpts,
    TracepointOpts,
    UprobeOpts,
    check_int,
    lib,
    libbpf_messages,
    prog_info,
)
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.records import ConfigRecord, RawHit, decode_record
from pytest_lbr.capture.hooks.tracer_maps import POOLED, MapSet, RingReader, TracerMaps
from pytest_lbr.capture.hooks.tracer_object import (
    tracer_image,
    tracer_layout,
    tracer_not_built,
    tracer_object,
)
from pytest_lbr.kernel.functions import btf_functions, btf_problem, expand_glob
from pytest_lbr.kernel.kernel_btf import tracer_offsets
from pytest_lbr.kernel.machine import machine
from pytest_lbr.kernel.percpu import preempt_count_symbols
from pytest_lbr.targets import Target

__all__ = ["DEFAULT_GLOB_FALLBACK", "HookSet", "try_load_fexit"]

#: How a kernel-function glob is hooked where kprobe.multi is missing
#: ("kprobe": one kprobe link per function on one loaded program; "fentry":
#: one tracer object loaded and verified per function).
#: kprobe attaches one link per function to one loaded program; fentry loads and
#: verifies one object per function, each holding ~7 fds (program, link, BTF, reused
#: maps), so a glob of hundreds of functions runs into RLIMIT_NOFILE (EMFILE), and
#: some functions refuse fexit (ENOTSUPP). So kprobe is the default: it scales to a
#: whole subsystem glob (bench/RESULTS-history.md, 2026-11-22, has the figures).
DEFAULT_GLOB_FALLBACK = "kprobe"

#: The maps every tracer object of a set shares with its first: (key, map name).
_SHARED_MAPS = (
    ("ringbuf", b"lbr_events"),
    ("bss", b".bss"),
    ("lost", b".data.lost"),
    ("armed", b".data.armed"),
    ("tgids", b"lbr_tgids"),
    ("cgroup", b"lbr_cgroup"),
)
_BPF_PROG_TYPE_TRACING = 26


@dataclass
class _Attached:
    """What one target resolved to: its functions (globs expand) and how it is hooked."""

    target: Target
    functions: list[str]
    how: str = ""
    #: kallsyms name of a BPF program target (bpf_prog_<tag>_<name>).
    ksym: str = ""


class HookSet:
    """The tracer attached at every target; a context manager.

    `snapshot=False` skips bpf_get_branch_snapshot() (hits only). Exit hooks
    (fexit, kretprobe, uretprobe) report the return value; `fentry=True` hooks
    BPF programs and kernel functions on entry instead. `tgid` limits kernel
    hooks to one process (default: this one; 0: all); `children` also follows
    the processes it forks while attached (and theirs); `cgroup` (a cgroup v2
    directory) keeps the tasks in it and its descendants instead. `interrupts`
    keeps hits in interrupt context (default: only where every task is traced,
    tgid 0); `skip_tgid` is never recorded. The kernel filters: uprobes see every
    process but `skip_tgid`. `maps` (a session's `TracerMaps`) lends the large
    maps the set's objects share and takes them back at `close` when they are
    clean; the lost counter and the armed switch are always the set's own.
    `kernel_config=False` leaves the kernel addresses and offsets out of the
    tracer's config (a probe that only loads needs none; finding them reads
    kallsyms and the kernel's BTF).
    """

    def __init__(
        self,
        targets: list[Target],
        *,
        snapshot: bool,
        fentry: bool = False,
        tgid: int | None = None,
        children: bool = False,
        cgroup: str | None = None,
        interrupts: bool | None = None,
        skip_tgid: int = 0,
        fallback: str = DEFAULT_GLOB_FALLBACK,
        maps: TracerMaps | None = None,
        kernel_config: bool = True,
    ) -> None:
        self.targets = list(targets)
        self.snapshot = snapshot
        self.fentry = fentry
        self.tgid = os.getpid() if tgid is None else tgid
        self.children = children
        self.cgroup = cgroup
        self.interrupts = self.tgid == 0 and cgroup is None if interrupts is None else interrupts
        #: A process never recorded, whatever the scope (a live reader's own).
        self.skip_tgid = skip_tgid
        #: How a glob is attached where kprobe.multi is missing: "kprobe" or "fentry".
        self.fallback = fallback
        self.attached: list[_Attached] = []
        #: Notes for the trace (e.g. "kfunc:tcp_*: kprobe.multi unavailable (EOPNOTSUPP)").
        self.notes: list[str] = []
        self._objs: list[int] = []
        #: Each object's copy of the tracer's bytes: libbpf reads them until load.
        self._images: list[Any] = []
        self._links: list[int] = []
        self._base: int | None = None
        self._uprobe_obj: int | None = None
        #: The ring's reader: the lent set's, or made once the first object loaded.
        self._ring: RingReader | None = None
        self._shared: dict[str, int] = {}
        #: The session's spare map sets: this set's maps come from there and go back.
        self._maps = maps
        #: The set `maps` lent (this hook set's until `close`).
        self._lent: MapSet | None = None
        self._refs: list[Any] = []
        self._object: Path | None = None
        self._kernel_config = kernel_config

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> HookSet:
        self.attach()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def attach(self) -> None:
        """Load and attach everything; on any error release what was made and re-raise."""
        try:
            self._object = tracer_object()
        except FileNotFoundError as exc:
            raise CaptureError(tracer_not_built(exc.filename)) from None
        try:
            if self._maps is not None and not self._shared:
                self._lent = self._maps.lend()
                if self._lent is not None:
                    self._shared = dict(self._lent.fds)
                    self._ring = self._lent.ring
            if self.children and self.tgid:
                self._attach_fork()
            for index, target in enumerate(self.targets):
                self.attached.append(self._attach_one(index, target))
            self._open_ringbuf()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Destroy every link, ring buffer and object (idempotent); give the maps
        back to the session's spare sets (`maps`) when they are clean."""
        clean = self._clean_maps()
        linked = bool(self._links)
        while self._links:
            lib.bpf_link__destroy(self._links.pop())
        ring, self._ring = self._ring, None
        if ring is None:
            clean = clean and not linked  # the hooks may have written what nobody read
        elif clean:  # every link is gone: read what they wrote, so nothing is left
            try:
                ring.consume()
            except OSError:
                clean = False
            ring.records.clear()
        spare = self._lent
        if clean and spare is None and ring is not None:
            # The first object's maps and this set's reader: the set outlives them.
            spare = MapSet({key: os.dup(self._shared[key]) for key in POOLED}, ring)
        while self._objs:
            lib.bpf_object__close(self._objs.pop())
        self._images.clear()
        while self._refs:
            self._refs.pop().close()
        self._base = self._uprobe_obj = None
        self._shared.clear()
        self._lent = None
        if spare is not None and self._maps is not None:
            if clean:
                self._maps.give_back(spare)
            else:
                self._maps.discard(spare)
        elif ring is not None:
            ring.close()

    def _clean_maps(self) -> bool:
        """Whether this set's pooled maps may serve another hook set once read to
        the end: a session lends them, they hold no followed tgids, and every hook
        was disarmed first (or none was loaded: a lent set is as it came)."""
        if self._maps is None or (self.children and self.tgid):
            return False
        if "armed" not in self._shared:
            return True
        try:
            self.set_armed(False)  # before the links go: no hook writes after the read
        except (CaptureError, OSError):
            return False
        return True

    @property
    def link_fds(self) -> list[int]:
        """fds of the BPF links made (for tests: `bpftool link show`, link info)."""
        return [lib.bpf_link__fd(link) for link in self._links]

    # -- reading hits --------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[RawHit]:
        """Hits that arrived so far (waits up to `timeout_ms` for the first)."""
        if self._ring is None:
            return []
        self._ring.poll(timeout_ms)
        return self._take()

    def drain(self) -> list[RawHit]:
        """Every hit still in the ring buffer."""
        if self._ring is None:
            return []
        self._ring.consume()
        return self._take()

    @property
    def lost(self) -> int:
        """Hits the kernel dropped because the ring buffer was full."""
        fd = self._shared.get("lost")
        if fd is None:
            return 0
        val = c_uint64()
        key = c_uint32(0)
        check_int(lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(val)), "read lost")
        return val.value

    def set_armed(self, armed: bool) -> None:
        """Switch every hook of the set on or off, attached all the while (the
        tracer's ``lbr_armed``; a set is armed from `attach`)."""
        fd = self._shared.get("armed")
        if fd is None:
            raise CaptureError("the hooks are not attached")
        key, val = c_uint32(0), c_uint32(int(armed))
        check_int(
            lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(val), 0),
            "arm the tracer" if armed else "disarm the tracer",
        )

    def _take(self) -> list[RawHit]:
        assert self._ring is not None
        records, self._ring.records = self._ring.records, []
        layout = tracer_layout(self._object)
        return [decode_record(r, layout) for r in records]

    def _open_ringbuf(self) -> None:
        if self._ring is None and "ringbuf" in self._shared:
            self._ring = RingReader(self._shared["ringbuf"])

    def load_fexit(self, function: str) -> None:
        """Load (never attach) the fexit tracer on kernel `function`; raises if refused."""
        obj, prog = self._open("lbr_fexit", self.tgid)
        check_int(
            lib.bpf_program__set_attach_target(prog, 0, function.encode()), "set_attach_target"
        )
        self._load(obj, f"fexit on {function}")

    # -- loading ------------------------------------------------------------------

    def _scope(self, tgid: int) -> tuple[int, int]:
        """(enum lbr_scope_kind, keep_irq) of an object filtering for `tgid` (0: none)."""
        c = tracer_layout(self._object).constants
        if self.cgroup is not None and tgid:
            kind = c["LBR_SCOPE_CGROUP"]
        elif not tgid:
            kind = c["LBR_SCOPE_ALL"]
        elif self.children:
            kind = c["LBR_SCOPE_TGIDS"]
        else:
            kind = c["LBR_SCOPE_TGID"]
        return kind, int(self.interrupts or not tgid)

    def _seed(self) -> None:
        """Fill the scope's maps right after the first load (the cgroup array is the
        set's own, made by that load), before anything attaches."""
        if self.children and self.tgid:
            key, one = c_uint32(self.tgid), ctypes.c_uint8(1)
            check_int(
                lib.bpf_map_update_elem(
                    self._shared["tgids"], ctypes.byref(key), ctypes.byref(one), 0
                ),
                "follow the traced process",
            )
        if self.cgroup is not None:
            try:
                fd = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                raise CaptureError(f"cgroup {self.cgroup}: {exc.strerror}") from None
            try:
                key, val = c_uint32(0), c_uint32(fd)
                check_int(
                    lib.bpf_map_update_elem(
                        self._shared["cgroup"], ctypes.byref(key), ctypes.byref(val), 0
                    ),
                    f"trace cgroup {self.cgroup}",
                )
            finally:
                os.close(fd)

    def _attach_fork(self) -> None:
        """scope="children": the tp_btf program that follows every fork of a followed process."""
        obj, prog = self._open("lbr_fork", self.tgid)
        try:
            self._load(obj, "following forks (tp_btf/sched_process_fork)")
            self._links.append(
                _link(lib.bpf_program__attach_trace(prog), "attach tp_btf/sched_process_fork")
            )
        except BpfError as exc:
            raise CaptureError(
                f'scope="children" needs a tp_btf program on sched_process_fork (BTF-typed '
                f"raw tracepoints, Linux 5.5, and kernel BTF), which this kernel refused: "
                f"{exc}; use --lbr-backend=graph"
            ) from None

    def _open(self, program: str, tgid: int, target: int = 0, function: int = 0) -> tuple[int, int]:
        """Open the tracer object with only `program` autoloaded; returns (obj, prog)."""
        path = self._object or tracer_object()
        data = tracer_image(path)
        # A copy per object: libelf may write to the image it parses in place.
        image = ctypes.create_string_buffer(data, len(data))
        opts = ObjectOpenOpts(sz=ctypes.sizeof(ObjectOpenOpts), object_name=b"lbr_tracer")
        obj = lib.bpf_object__open_mem(image, len(data), ctypes.byref(opts))
        if not obj or lib.libbpf_get_error(obj):
            raise BpfError(ctypes.get_errno() or errno.EINVAL, f"open {path}")
        self._objs.append(obj)
        self._images.append(image)
        found = 0
        p = lib.bpf_object__next_program(obj, None)
        while p:
            name = lib.bpf_program__name(p).decode()
            check_int(lib.bpf_program__set_autoload(p, name == program), "set_autoload")
            if name == program:
                found = p
            p = lib.bpf_object__next_program(obj, p)
        if not found:
            raise CaptureError(
                f"LBR tracer object has no program {program!r}; rebuild it (make -C bpf)"
            )
        scope, keep_irq = self._scope(tgid)
        cfg = ConfigRecord(
            tgid=tgid,
            target=target,
            snapshot=int(self.snapshot),
            function=function,
            scope=scope,
            keep_irq=keep_irq,
            skip_tgid=self.skip_tgid,
            **(_kernel_config() if self._kernel_config else {}),
        )
        rodata = lib.bpf_object__find_map_by_name(obj, b".rodata")
        check_int(
            lib.bpf_map__set_initial_value(rodata, ctypes.byref(cfg), ctypes.sizeof(cfg)),
            "set tracer config",
        )
        # Share the ring buffer, snapshot slots, lost counter and scope maps with the first object.
        for key, name in _SHARED_MAPS:
            m = lib.bpf_object__find_map_by_name(obj, name)
            if key in self._shared:
                check_int(lib.bpf_map__reuse_fd(m, self._shared[key]), f"reuse {name.decode()}")
        return obj, found

    def _load(self, obj: int, what: str) -> None:
        try:
            check_int(lib.bpf_object__load(obj), f"load LBR tracer for {what}")
        except BpfError as exc:
            if exc.errno == errno.EPERM:
                raise CaptureError(
                    f"{what}: loading the LBR tracer was refused (EPERM): "
                    "this kernel does not allow tracing programs here (lockdown or missing CAP_BPF)"
                ) from None
            raise
        if "armed" not in self._shared:
            # The set's first object: the maps it made (all, or those not lent) are
            # the others'; the scope's maps are filled before anything attaches.
            for key, name in _SHARED_MAPS:
                if key not in self._shared:
                    m = lib.bpf_object__find_map_by_name(obj, name)
                    self._shared[key] = lib.bpf_map__fd(m)
            self._seed()

    def _prog_in(self, obj: int, name: str) -> int:
        return int(lib.bpf_object__find_program_by_name(obj, name.encode()))

    def _base_obj(self, uprobe: bool) -> int:
        """The shared object holding the kprobe/tracepoint (or uprobe) programs."""
        attr = "_uprobe_obj" if uprobe else "_base"
        obj = getattr(self, attr)
        if obj is not None:
            return int(obj)
        progs = self._base_programs(uprobe)
        # Uprobes trace a binary, whoever runs it: no process filter.
        obj, _ = self._open(progs[0], 0 if uprobe else self.tgid)
        for name in progs:
            lib.bpf_program__set_autoload(self._prog_in(obj, name), True)
        self._load(obj, "uprobes" if uprobe else "kprobes and tracepoints")
        setattr(self, attr, obj)
        return int(obj)

    def _base_programs(self, uprobe: bool) -> list[str]:
        """The programs of the shared object this set's targets attach: only those
        are loaded (each is a verifier run; a tracepoint trace used to load five)."""
        ret = not self.fentry
        names: list[str] = []
        for t in self.targets:
            if uprobe and t.kind in ("uprobe", "uretprobe"):
                names.append("lbr_uretprobe" if t.kind == "uretprobe" else "lbr_uprobe")
            elif not uprobe and t.kind == "tp":
                names.append("lbr_tracepoint")
            elif not uprobe and t.kind == "kfunc" and t.is_glob:
                names.append("lbr_kretprobe_multi" if ret else "lbr_kprobe_multi")
                if self.fallback != "fentry":  # one kprobe per function without kprobe.multi
                    names.append("lbr_kretprobe" if ret else "lbr_kprobe")
        if not names:
            raise CaptureError("no target of this hook set attaches a kprobe, tracepoint or uprobe")
        return list(dict.fromkeys(names))

    def _attach_trace(
        self, index: int, what: str, attach_fd: int, func: str, function: int = 0
    ) -> None:
        """fentry/fexit on `func` (a kernel function, or a BPF program's function).

        `function` is `func`'s index within a glob target (the hit's cookie).
        """
        prog_name = "lbr_fentry" if self.fentry else "lbr_fexit"
        obj, prog = self._open(prog_name, self.tgid, target=index, function=function)
        check_int(
            lib.bpf_program__set_attach_target(prog, attach_fd, func.encode()), "set_attach_target"
        )
        self._load(obj, what)
        self._links.append(
            _link(lib.bpf_program__attach_trace(prog), f"attach {prog_name} to {what}")
        )

    # -- per target kind -----------------------------------------------------------

    def _attach_one(self, index: int, target: Target) -> _Attached:
        if target.kind == "prog":
            fd, func, ksym = self._resolve_prog(target)
            self._attach_prog(index, target, fd, func)
            return _Attached(target, [func], "fentry" if self.fentry else "fexit", ksym)
        if target.kind == "kfunc":
            assert target.function is not None
            if target.is_glob:
                return self._attach_glob(index, target)
            problem = btf_problem(target)
            if problem:
                raise CaptureError(problem)
            self._attach_trace(index, target.spec, 0, target.function)
            return _Attached(target, [target.function], "fentry" if self.fentry else "fexit")
        if target.kind == "tp":
            assert target.tracepoint is not None
            cat, _, name = target.tracepoint.partition("/")
            obj = self._base_obj(uprobe=False)
            opts = TracepointOpts(sz=ctypes.sizeof(TracepointOpts), bpf_cookie=index << 32)
            link = lib.bpf_program__attach_tracepoint_opts(
                self._prog_in(obj, "lbr_tracepoint"),
                cat.encode(),
                name.encode(),
                ctypes.byref(opts),
            )
            self._links.append(_link(link, f"attach to {target.spec}"))
            return _Attached(target, [target.tracepoint], "tracepoint")
        if target.kind in ("uprobe", "uretprobe"):
            assert target.binary is not None and target.function is not None
            if not os.path.exists(target.binary):
                raise CaptureError(f"{target.spec}: no such file {target.binary}")
            obj = self._base_obj(uprobe=True)
            ret = target.kind == "uretprobe"
            uopts = UprobeOpts(
                sz=ctypes.sizeof(UprobeOpts),
                bpf_cookie=index << 32,
                retprobe=ret,
                func_name=target.function.encode(),
            )
            link = lib.bpf_program__attach_uprobe_opts(
                self._prog_in(obj, "lbr_uretprobe" if ret else "lbr_uprobe"),
                -1,
                target.binary.encode(),
                0,
                ctypes.byref(uopts),
            )
            self._links.append(_link(link, f"attach to {target.spec}"))
            return _Attached(target, [target.function], target.kind)
        raise CaptureError(f"{target.spec}: unknown target kind {target.kind!r}")

    def _attach_prog(self, index: int, target: Target, fd: int, func: str) -> None:
        """fentry/fexit on a BPF program, with one clear line where the kernel cannot."""
        info, _ = prog_info(fd)
        hook = "fentry" if self.fentry else "fexit"
        if not info.btf_id:
            # fentry/fexit find the program's function by its BTF (libbpf refuses
            # in bpf_program__set_attach_target with a bare EINVAL otherwise).
            raise CaptureError(
                f"{target.spec}: the program has no BTF (built without -g, or its loader "
                f"dropped it): the lbr backend cannot attach {hook} to it; rebuild with -g "
                "or use --lbr-backend=graph"
            )
        if info.type != _BPF_PROG_TYPE_TRACING:
            self._attach_trace(index, f"{target.spec} ({func})", fd, func)
            return
        with libbpf_messages() as log:
            try:
                self._attach_trace(index, f"{target.spec} ({func})", fd, func)
            except BpfError as exc:
                why = _kernel_refusal(log)
                if not why:
                    # What libbpf would have printed: on the error, for its reader.
                    exc.log = "".join(log)
                    if exc.log:
                        exc.add_note(f"libbpf's log:\n{exc.log.rstrip()}")
                    raise
                # Before Linux 6.8 ("bpf: Relax tracing prog recursive attach
                # rules") bpf_check_attach_target() refused fentry/fexit on a
                # fentry/fexit program; since, one level of nesting is allowed
                # (the fentry_recursive selftest).
                err = exc.errno or errno.EINVAL
                raise CaptureError(
                    f"{target.spec}: the program is itself a tracing (fentry/fexit) program "
                    f"and this kernel refuses {hook} on it ({os.strerror(err)}: {why}); "
                    "use --lbr-backend=graph"
                ) from None

    def _resolve_prog(self, target: Target) -> tuple[int, str, str]:
        """(fd, main function's BTF name, kallsyms name) of a BPF program target."""
        from pytest_lbr.programs.find import resolve_program

        ref = resolve_program(target)
        self._refs.append(ref)  # its fd stays open until close()
        return ref.fd, ref.display_name, ref.ksym

    def _attach_glob(self, index: int, target: Target) -> _Attached:
        assert target.function is not None
        names = expand_glob(target.function)
        if not names:
            raise CaptureError(
                f"{target.spec}: the glob matches no traceable kernel function "
                "(available_filter_functions / BTF)"
            )
        retprobe = not self.fentry
        syms = (c_char_p * len(names))(*(n.encode() for n in names))
        cookies = (c_uint64 * len(names))(*((index << 32) | i for i in range(len(names))))
        opts = KprobeMultiOpts(
            sz=ctypes.sizeof(KprobeMultiOpts),
            syms=syms,
            cookies=cookies,
            cnt=len(names),
            retprobe=retprobe,
        )
        obj = self._base_obj(uprobe=False)
        multi = "lbr_kretprobe_multi" if retprobe else "lbr_kprobe_multi"
        # Without CONFIG_FPROBE libbpf would print its "failed to attach" for every glob.
        with libbpf_messages() as log:
            link = lib.bpf_program__attach_kprobe_multi_opts(
                self._prog_in(obj, multi), None, ctypes.byref(opts)
            )
            err = ctypes.get_errno()
        if link:
            self._links.append(link)
            return _Attached(target, names, "kprobe.multi")
        # Linux commit 0dcac2725406 ("bpf: Add multi kprobe link") (in v5.18) needs CONFIG_FPROBE.
        if err not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, 524):  # 524: ENOTSUPP
            exc = BpfError(
                err, f"attach kprobe.multi to {target.spec} ({len(names)} functions)", "".join(log)
            )
            if exc.log:
                exc.add_note(f"libbpf's log:\n{exc.log.rstrip()}")
            raise exc
        untraced = 0
        if self.fallback == "fentry":
            # fentry/fexit need the function in BTF; the others stay untraced.
            in_btf = set(btf_functions())
            untraced = len(names)
            names = [n for n in names if n in in_btf]
            untraced -= len(names)
            if not names:
                raise CaptureError(f"{target.spec}: no matching function is in the kernel BTF")
        self.notes.append(
            f"{target.spec}: kprobe.multi unavailable ({errno.errorcode.get(err, err)}); "
            f"{len(names)} {self.fallback} hooks instead"
            + (f" ({untraced} functions without BTF left out)" if untraced else "")
        )
        start = time.monotonic()
        for i, name in enumerate(names):
            if self.fallback == "fentry":
                # One load per function; the config carries the function's index.
                self._attach_trace(index, f"kfunc:{name}", 0, name, function=i)
            else:
                kopts = KprobeOpts(
                    sz=ctypes.sizeof(KprobeOpts), bpf_cookie=(index << 32) | i, retprobe=retprobe
                )
                prog = self._prog_in(obj, "lbr_kretprobe" if retprobe else "lbr_kprobe")
                link = lib.bpf_program__attach_kprobe_opts(prog, name.encode(), ctypes.byref(kopts))
                self._links.append(_link(link, f"attach kprobe to {name} ({target.spec})"))
        how = f"{self.fallback} x{len(names)} in {time.monotonic() - start:.1f}s"
        return _Attached(target, names, how)


def _kernel_config() -> dict[str, int]:
    """struct lbr_config's fields saying where the kernel keeps what the tracer reads (0: unknown).

    x86's preempt_count from /proc/kallsyms (and, as `pcpu_hot.preempt_count`,
    the member's offset from BTF); the task_struct offsets from BTF. Each read once
    per process: as CO-RE relocations in the object, libbpf parsed the vmlinux BTF
    at every hook load.
    """
    offsets = tracer_offsets()
    cfg = {
        "task_tgid": offsets.task_tgid or 0,
        "task_preempt_count": offsets.task_preempt_count or 0,
    }
    if machine().name == "x86_64":
        syms = preempt_count_symbols()
        var = syms.get("__preempt_count", 0)
        if not var and "pcpu_hot" in syms and offsets.pcpu_hot_preempt_count is not None:
            var = syms["pcpu_hot"] + offsets.pcpu_hot_preempt_count
        cfg["sym_preempt_count"] = var
        cfg["sym_per_cpu_offset"] = syms.get("__per_cpu_offset", 0)
    return cfg


def _kernel_refusal(log: list[str]) -> str:
    """The verifier's reason in libbpf's log of a failed load ("" when absent)."""
    for line in "".join(log).splitlines():
        if "Cannot recursively attach" in line:
            return line.strip()
    return ""


def try_load_fexit(function: str = "vfs_write") -> None:
    """Load (never attach) the fexit tracer on `function`: raises if this kernel refuses."""
    # Whether it loads does not depend on the addresses it would read (0: none read);
    # finding them reads /proc/kallsyms, which a session probing the LBR
    # backend to end up on the graph backend with kernel functions never needs.
    hs = HookSet([], snapshot=True, kernel_config=False)  # never attached: one load
    try:
        hs.load_fexit(function)
    finally:
        hs.close()


def _link(link: int | None, what: str) -> int:
    if not link:
        raise BpfError(ctypes.get_errno() or errno.EINVAL, what)
    return int(link)
