"""The hook set's job of loading: the LBR tracer object opened with the scope's
config (which processes, interrupts, the kernel's addresses), its shared maps
reused from the set's first object or a session's spare set, and the verifier's
refusal said in one line."""

from __future__ import annotations

import ctypes
import errno
import os
from ctypes import c_uint32

from pytest_lbr.bpf.libbpf import (
    BpfError,
    ObjectOpenOpts,
    check_int,
    lib,
)
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.records import ConfigRecord
from pytest_lbr.capture.hooks.state import HookState
from pytest_lbr.capture.hooks.tracer_maps import POOLED
from pytest_lbr.capture.hooks.tracer_object import (
    tracer_image,
    tracer_layout,
    tracer_object,
)
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.kernel.kernel_btf import tracer_offsets
from pytest_lbr.kernel.machine import machine
from pytest_lbr.kernel.percpu import preempt_count_symbols

__all__ = ["BPF_PROG_TYPE_TRACING", "SHARED_MAPS", "TracerLoading", "kernel_refusal"]

#: The maps a hook set's objects share: (HookSet key, name in the object).
SHARED_MAPS = (
    ("ringbuf", b"lbr_events"),
    ("bss", b".bss"),
    ("lost", b".data.lost"),
    ("armed", b".data.armed"),
    ("tgids", b"lbr_tgids"),
    ("cgroup", b"lbr_cgroup"),
)
BPF_PROG_TYPE_TRACING = 26


class TracerLoading(HookState):
    """Loading the tracer's objects (`HookSet`'s first job)."""

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
        cfg = self._config(tgid, target, function)
        rodata = lib.bpf_object__find_map_by_name(obj, b".rodata")
        check_int(
            lib.bpf_map__set_initial_value(rodata, ctypes.byref(cfg), ctypes.sizeof(cfg)),
            "set tracer config",
        )
        # Share the ring buffer, snapshot slots, lost counter and scope maps with the first object.
        for key, name in SHARED_MAPS:
            m = lib.bpf_object__find_map_by_name(obj, name)
            if key in self._shared:
                check_int(lib.bpf_map__reuse_fd(m, self._shared[key]), f"reuse {name.decode()}")
        return obj, found

    def _config(self, tgid: int, target: int = 0, function: int = 0) -> ConfigRecord:
        """The tracer's config (its .rodata) for an object filtering for `tgid`."""
        scope, keep_irq = self._scope(tgid)
        return ConfigRecord(
            tgid=tgid,
            target=target,
            snapshot=int(self.snapshot),
            function=function,
            scope=scope,
            keep_irq=keep_irq,
            skip_tgid=self.skip_tgid,
            **(_kernel_config() if self._kernel_config else {}),
        )

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
            for key, name in SHARED_MAPS:
                if key not in self._shared:
                    m = lib.bpf_object__find_map_by_name(obj, name)
                    self._shared[key] = lib.bpf_map__fd(m)
            self._seed()

    def _load_again(
        self, program: str, config: bytes, attach_fd: int, func: str, what: str
    ) -> bool:
        """The session's image of `program` with `config` (`TracerImage`) loaded
        with this set's maps and attached to function `func` of the program behind
        `attach_fd`. False where there is no image, the set's shared maps are not
        lent, or the kernel refuses the load: then libbpf loads it (and says why)."""
        image = self._maps.images.get(program, config) if self._maps is not None else None
        if image is None or any(key not in self._shared for key in POOLED):
            return False
        made: dict[str, int] = {}
        try:
            if "armed" not in self._shared:  # the set's first object
                made = image.new_set_maps()
            prog_fd = image.load({**self._shared, **made}, attach_fd, func)
        except BpfError:
            for fd in made.values():
                os.close(fd)
            return False
        self._own_fds.extend([*made.values(), prog_fd])
        if made:
            self._shared.update(made)
            self._seed()  # before anything attaches
        link = check_int(
            lib.bpf_link_create(prog_fd, 0, image.attach_type, None),
            f"attach {program} to {what}",
        )
        self._link_fds.append(link)
        return True

    def _remember(self, program: str, config: bytes, obj: int, prog: int) -> None:
        """Keep what libbpf's load of `program` gave the kernel, for `_load_again`."""
        images = self._maps.images if self._maps is not None else None
        if images is not None and not images.known(program, config):
            image = tracer_image(self._object or tracer_object())
            images.remember(program, config, obj, prog, image, dict(SHARED_MAPS))

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
            for in_uprobe, name in kind_of(t).shared_programs(t, ret=ret, fallback=self.fallback):
                if in_uprobe == uprobe:
                    names.append(name)
        if not names:
            raise CaptureError("no target of this hook set attaches a kprobe, tracepoint or uprobe")
        return list(dict.fromkeys(names))


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


def kernel_refusal(log: list[str]) -> str:
    """The verifier's reason in libbpf's log of a failed load ("" when absent)."""
    for line in "".join(log).splitlines():
        if "Cannot recursively attach" in line:
            return line.strip()
    return ""
