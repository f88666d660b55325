"""The hook set's job of attaching: each target resolved (globs expand, a program
target to its JIT image) and hooked the way its kind and this kernel allow
(fentry/fexit, kprobe, kprobe.multi or its fallback, tracepoint, uprobe), and the
fork hook that follows a process's children."""

from __future__ import annotations

import ctypes
import errno
import os
import time
from ctypes import c_char_p, c_uint64

from pytest_lbr.bpf.libbpf import (
    BpfError,
    KprobeMultiOpts,
    KprobeOpts,
    check_int,
    lib,
    libbpf_messages,
    prog_info,
)
from pytest_lbr.capture.base import CaptureError
from pytest_lbr.capture.hooks.loader import BPF_PROG_TYPE_TRACING, TracerLoading, kernel_refusal
from pytest_lbr.capture.hooks.state import DEFAULT_GLOB_FALLBACK, Attached
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.kernel.functions import btf_functions, expand_glob
from pytest_lbr.targets import Target

__all__ = ["DEFAULT_GLOB_FALLBACK", "Attached", "TargetAttaching"]


#: How a kernel-function glob is hooked where kprobe.multi is missing
#: ("kprobe": one kprobe link per function on one loaded program; "fentry":
#: one tracer object loaded and verified per function).
class TargetAttaching(TracerLoading):
    """Attaching the loaded tracer at every target (`HookSet`'s second job)."""

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

    def attach_trace(
        self, index: int, what: str, attach_fd: int, func: str, function: int = 0
    ) -> None:
        """fentry/fexit on `func` (a kernel function, or a BPF program's function).

        `function` is `func`'s index within a glob target (the hit's cookie).
        """
        prog_name = "lbr_fentry" if self.fentry else "lbr_fexit"
        # A hook on a BPF program: loaded again from the session's first load of it
        # where it can be (`TracerImage`); a kernel function's stays libbpf's.
        again = bool(attach_fd) and self._maps is not None
        config = bytes(self._config(self.tgid, index, function)) if again else b""
        if again and self._load_again(prog_name, config, attach_fd, func, what):
            return
        obj, prog = self._open(prog_name, self.tgid, target=index, function=function)
        check_int(
            lib.bpf_program__set_attach_target(prog, attach_fd, func.encode()), "set_attach_target"
        )
        self._load(obj, what)
        if again:
            self._remember(prog_name, config, obj, prog)
        self._links.append(
            _link(lib.bpf_program__attach_trace(prog), f"attach {prog_name} to {what}")
        )

    # -- per target kind -----------------------------------------------------------

    def _attach_one(self, index: int, target: Target) -> Attached:
        return kind_of(target).attach(self, index, target)

    # -- what a kind hooks its target with (`pytest_lbr.capture.kinds.protocol.Hooking`)

    def shared_program(self, uprobe: bool, name: str) -> int:
        """Program `name` of the shared kprobe/tracepoint (or uprobe) object, loaded."""
        return self._prog_in(self._base_obj(uprobe), name)

    def keep_link(self, link: int | None, what: str) -> None:
        """Keep `link` (the set closes it), or raise why `what` failed."""
        self._links.append(_link(link, what))

    def attach_prog(self, index: int, target: Target, fd: int, func: str) -> None:
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
        if info.type != BPF_PROG_TYPE_TRACING:
            self.attach_trace(index, f"{target.spec} ({func})", fd, func)
            return
        with libbpf_messages() as log:
            try:
                self.attach_trace(index, f"{target.spec} ({func})", fd, func)
            except BpfError as exc:
                why = kernel_refusal(log)
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

    def resolve_prog(self, target: Target) -> tuple[int, str, str]:
        """(fd, main function's BTF name, kallsyms name) of a BPF program target."""
        from pytest_lbr.programs.find import resolve_program

        ref = resolve_program(target)
        self._refs.append(ref)  # its fd stays open until close()
        return ref.fd, ref.display_name, ref.ksym

    def attach_glob(self, index: int, target: Target) -> Attached:
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
            return Attached(target, names, "kprobe.multi")
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
                self.attach_trace(index, f"kfunc:{name}", 0, name, function=i)
            else:
                kopts = KprobeOpts(
                    sz=ctypes.sizeof(KprobeOpts), bpf_cookie=(index << 32) | i, retprobe=retprobe
                )
                prog = self._prog_in(obj, "lbr_kretprobe" if retprobe else "lbr_kprobe")
                link = lib.bpf_program__attach_kprobe_opts(prog, name.encode(), ctypes.byref(kopts))
                self._links.append(_link(link, f"attach kprobe to {name} ({target.spec})"))
        how = f"{self.fallback} x{len(names)} in {time.monotonic() - start:.1f}s"
        return Attached(target, names, how)


def _link(link: int | None, what: str) -> int:
    if not link:
        raise BpfError(ctypes.get_errno() or errno.EINVAL, what)
    return int(link)
