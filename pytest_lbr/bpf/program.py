"""A loaded BPF program of a `BpfObject`: run it (BPF_PROG_TEST_RUN), attach it
(XDP, TC, cgroups, sockmaps, perf events, iterators ...), and read its iterator.

`pytest_lbr.bpf.harness` holds the objects that own the programs; `pytest_lbr.bpf`
exports the public names of both.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pytest_lbr.bpf.attach import NEWER_PROG_TYPES, NetAttach
from pytest_lbr.bpf.libbpf import (
    BPF_XDP,
    XDP_FLAGS_DRV_MODE,
    XDP_FLAGS_SKB_MODE,
    BpfError,
    BpfLinkCreateOpts,
    bpf_iter_attach_opts,
    bpf_test_run_opts,
    check_int,
    lib,
    libbpf_messages,
    prog_info,
)
from pytest_lbr.bpf.links import (
    TC_DIRECTIONS,
    XDP_HINTS,
    AttachError,
    Link,
    LinkT,
    PerCpuLink,
    SockmapLink,
    TcLink,
    XdpLink,
    interface_index,
    interface_words,
    last_message,
    tc_attach,
)
from pytest_lbr.bpf.maps import Map
from pytest_lbr.bpf.netns import call_in
from pytest_lbr.programs.written import Written, WrittenPrograms

__all__ = [
    "PERF_EVENTS",
    "PERMISSION",
    "ROOT_HINT",
    "XDP_MODES",
    "Program",
    "ProgramOwner",
    "RunResult",
]


class ProgramOwner(Protocol):
    """What a program needs of its object (a `pytest_lbr.bpf.BpfObject`): this
    module does not import the objects' module, which imports it."""

    def check_open(self, what: str) -> None: ...

    def keep_link(self, link: Link) -> None: ...

    @property
    def closed(self) -> bool: ...

    def on_close(self, callback: Callable[[], None]) -> None: ...

    @property
    def written(self) -> WrittenPrograms:
        """The book its programs add what they were loaded from to (its loader's)."""
        ...


# Room for data_out beyond data_in: XDP and skb programs may grow the packet
# (bpf_xdp_adjust_head with a negative delta, bpf_skb_change_tail ...).
_DATA_OUT_SLACK = 4096

#: Program types `Program.attach_cgroup` takes (libbpf's names).
_CGROUP_TYPES = frozenset(
    {"cgroup_skb", "cgroup_sock", "cgroup_sock_addr", "sock_ops", "cgroup_device",
     "cgroup_sysctl", "cgroup_sockopt"}
)  # fmt: skip
#: How a program of each type that libbpf does not auto-attach is attached here.
_ATTACH_WITH = {
    **dict.fromkeys(_CGROUP_TYPES, "use prog.attach_cgroup(path)"),
    "sk_msg": "use prog.attach_sockmap(map)",
    "sk_skb": "use prog.attach_sockmap(map)",
    "perf_event": "use prog.attach_perf_event()",
    "xdp": "use prog.attach_xdp(interface)",
    "sched_cls": "use prog.attach_tc(interface)",
    "tcx": "use prog.attach_tcx(interface)",  # by section: SEC("tcx/ingress")
    "sk_lookup": "use prog.attach_netns(netns)",
    "flow_dissector": "use prog.attach_netns(netns)",
    "netfilter": "use prog.attach_netfilter(hook)",
    "usdt": "use prog.attach_usdt(binary, provider, name)",  # by section: SEC("usdt")
    "struct_ops": "register its map with obj.maps[NAME].attach_struct_ops()",
    "syscall": "run it with prog.run(ctx=...)",
    "sk_reuseport": "attach prog.fd to a socket of the group yourself "
    "(setsockopt SO_ATTACH_REUSEPORT_EBPF)",
}
#: uapi enum bpf_attach_type values a sockmap program attaches with.
_SOCKMAP_ATTACH = {4, 5, 7, 40}  # SK_SKB_STREAM_PARSER, _VERDICT, SK_MSG_VERDICT, SK_SKB_VERDICT
#: `Program.attach_perf_event(event=...)`: (perf type, config), uapi linux/perf_event.h.
PERF_EVENTS = {
    "cpu-clock": (1, 0),  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK
    "task-clock": (1, 1),
    "cycles": (0, 0),  # PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES
    "instructions": (0, 1),
}
_SYSCALL_PROG = 31  # uapi enum bpf_prog_type: BPF_PROG_TYPE_SYSCALL
_PERF_FREQ = 1 << 10  # perf_event_attr.freq: sample_period is a frequency
#: errnos that mean "not allowed": a hint to run as root goes with them.
PERMISSION = (errno.EPERM, errno.EACCES)
ROOT_HINT = "attaching needs root (CAP_BPF with CAP_NET_ADMIN or CAP_PERFMON, or CAP_SYS_ADMIN)"

#: `Program.attach_xdp(mode=...)`: the kernel's choice (driver where the driver has
#: native XDP, else generic), the driver's own XDP, or the generic (skb) path.
XDP_MODES = {"auto": 0, "driver": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}


_ITER_HINTS = {
    errno.EPERM: "running an iterator needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN)",
    errno.EACCES: "running an iterator needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN)",
    errno.EOPNOTSUPP: "this kernel cannot attach iterators (Linux >= 5.8 with BTF can)",
    errno.EAGAIN: "the program returned non-zero for an object: an iterator returns 0",
}


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


class Program(NetAttach):
    """One loaded BPF program of a `BpfObject` (`NetAttach`: attach_tcx, attach_netns,
    attach_netfilter)."""

    def __init__(self, obj: ProgramOwner, ptr: int, written: bytes | None = None) -> None:
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
        # The kernel keeps only the translated instructions: the owner's book keeps
        # what libbpf loaded, so a trace given the book can tell which helper calls
        # the verifier inlined. `written`: what runs instead of libbpf's (exact
        # coverage's counters).
        insns = lib.bpf_program__insns(ptr)
        if written is None and insns:
            written = ctypes.string_at(insns, lib.bpf_program__insn_cnt(ptr) * 8)
        path = getattr(obj, "path", None)
        obj.written.add(
            self.id, Written(written or None, None if path is None else str(path), self.name)
        )

    @property
    def fd(self) -> int:
        """The program's fd, owned by its object (do not close it)."""
        self._obj.check_open(f"program {self.name}")
        return self._fd

    @property
    def type(self) -> str:
        """Program type as libbpf names it: "xdp", "kprobe", "tracing", ..."""
        name = lib.libbpf_bpf_prog_type_str(self._type_id)
        return name.decode() if name else NEWER_PROG_TYPES.get(self._type_id, str(self._type_id))

    @property
    def object(self) -> ProgramOwner:
        """The `BpfObject` it belongs to."""
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
        raw tracepoints, the arguments), as bytes or a ctypes structure. A
        `SEC("syscall")` program takes only `ctx`, runs once, and hands back the
        context as it left it (`RunResult.ctx`).
        """
        syscall = self._type_id == _SYSCALL_PROG
        if syscall and (data or repeat != 1):
            raise ValueError(
                f"{self.name} is a syscall program: it runs once on a ctx (run(ctx=...)), "
                "with no data and no repeat"
            )
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
            if syscall:  # the kernel writes the context back into ctx_in
                ctx_out = ctx_in
            else:
                opts.ctx_out = ctypes.addressof(ctx_out)
                opts.ctx_size_out = len(raw)
        # bpf_prog_test_run_syscall() refuses any repeat (net/bpf/test_run.c).
        opts.repeat = 0 if syscall else repeat
        check_int(
            lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), f"test run of {self.name}"
        )
        out = data_out.raw[: opts.data_size_out] if data else b""
        if syscall and ctx_out is not None:
            ctx_bytes: bytes | None = ctx_out.raw
        else:
            ctx_bytes = ctx_out.raw[: opts.ctx_size_out] if ctx_out is not None else None
        return RunResult(retval=opts.retval, data=out, duration_ns=opts.duration, ctx=ctx_bytes)

    def attach(self) -> Link:
        """Attach the program where its ELF section says (`SEC("tp/syscalls/...")`,
        `SEC("kprobe/...")`, `SEC("uprobe//path:fn")`, ...), as libbpf's auto-attach
        does. The link is destroyed by `Link.close()` or when the object closes.
        Programs that need an interface, a namespace or a netfilter hook are attached with
        `attach_xdp` / `attach_tc` / `attach_tcx`, `attach_netns`, `attach_netfilter`.
        """
        self._obj.check_open(f"program {self.name}")
        with libbpf_messages() as log:
            ptr = lib.bpf_program__attach(self._ptr)
            err = ctypes.get_errno() or errno.EINVAL
        if not ptr and err == errno.EOPNOTSUPP and not log:
            # libbpf has no auto-attach for this section (it says nothing then; a
            # kernel's refusal of an auto-attach comes with libbpf's line).
            how = _ATTACH_WITH.get(self.section.partition("/")[0]) or _ATTACH_WITH.get(
                self.type, "attach it yourself with prog.fd"
            )
            raise AttachError(
                err,
                f"cannot attach {self.name}",
                f'libbpf has no auto-attach for SEC("{self.section}"): {how}',
            )
        if not ptr:
            raise BpfError(err, f"attach {self.name}")
        return self._keep(Link(self.name, ptr))

    @property
    def section(self) -> str:
        """The ELF section the program came from, as written in `SEC("...")`."""
        name = lib.bpf_program__section_name(self._ptr)
        return name.decode() if name else ""

    def iterate(self, map: Map | None = None) -> bytes:  # noqa: A002 -- libbpf's word
        """Run an iterator program (`SEC("iter/task")`, `SEC("iter/bpf_map")`, ...) once
        over everything it iterates; what it wrote (`BPF_SEQ_PRINTF`, `bpf_seq_write`),
        as `cat` of its pinned file would print it. It runs in this thread, in the
        read(2)s of an iterator made (`bpf_program__attach_iter`) and destroyed per call.
        `map`: the map whose elements a `SEC("iter/bpf_map_elem")` (or
        `iter/sk_storage_map`) program walks. AttachError (one line) when it is not an
        iterator or the kernel refuses it.
        """
        self._obj.check_open(f"program {self.name}")
        section = self.section
        if self.type != "tracing" or not section.startswith("iter"):
            raise AttachError(
                errno.EINVAL,
                f"cannot iterate {self.name}",
                f'it is a {self.type} program from SEC("{section}"), not an iterator '
                '(SEC("iter/task") or another SEC("iter/...") makes one)',
            )
        what = f'cannot iterate {self.name} (SEC("{section}"))'
        opts = None
        if map is not None:
            # union bpf_iter_link_info { struct { __u32 map_fd; } map; ... } (16 bytes
            # with its cgroup member, Linux >= 6.1; the kernel takes a shorter one).
            info = (ctypes.c_uint32 * 4)(map.fd)
            opts = bpf_iter_attach_opts(
                sz=ctypes.sizeof(bpf_iter_attach_opts),
                link_info=ctypes.addressof(info),
                link_info_len=ctypes.sizeof(info),
            )
        with libbpf_messages() as log:
            link = lib.bpf_program__attach_iter(
                self._ptr, None if opts is None else ctypes.byref(opts)
            )
            err = ctypes.get_errno() or errno.EINVAL
        if not link:
            hint = _ITER_HINTS.get(err, "") or last_message(log)
            if err == errno.EBADF and map is None:
                hint = "a map element iterator needs its map: prog.iterate(map=obj.maps[NAME])"
            raise AttachError(err, what, hint)
        chunks: list[bytes] = []
        try:
            fd = lib.bpf_iter_create(lib.bpf_link__fd(link))
            if fd < 0:
                err = -fd if fd != -1 else (ctypes.get_errno() or errno.EINVAL)
                raise AttachError(err, what, _ITER_HINTS.get(err, ""))
            try:
                while chunk := _read_iter(fd, what):
                    chunks.append(chunk)
            finally:
                os.close(fd)
        finally:
            lib.bpf_link__destroy(link)
        return b"".join(chunks)

    def attach_cgroup(self, cgroup: str | os.PathLike[str] = "/sys/fs/cgroup") -> Link:
        """Attach a cgroup program (`SEC("cgroup_skb/egress")`, `SEC("cgroup/connect4")`,
        `SEC("sockops")`, ...) to a cgroup v2 directory as a BPF link
        (`bpf_program__attach_cgroup`, multi-attach: other programs there stay). It runs
        for the processes of that cgroup and the cgroups below it; the default, the
        root, is the whole machine. AttachError (one line) when the kernel refuses.
        """
        self._obj.check_open(f"program {self.name}")
        path = os.fspath(cgroup)
        what = f"cannot attach {self.name} to cgroup {path}"
        if self.type not in _CGROUP_TYPES:
            raise AttachError(
                errno.EINVAL,
                what,
                f'it is a {self.type} program from SEC("{self.section}"); cgroup programs '
                'come from SEC("cgroup_skb/..."), SEC("cgroup/..."), SEC("sockops")',
            )
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise AttachError(
                exc.errno or errno.ENOENT, what, "give a cgroup v2 directory such as /sys/fs/cgroup"
            ) from None
        try:
            with libbpf_messages() as log:
                ptr = lib.bpf_program__attach_cgroup(self._ptr, fd)
                err = ctypes.get_errno() or errno.EINVAL
        finally:
            os.close(fd)
        if not ptr:
            raise AttachError(err, what, ROOT_HINT if err in PERMISSION else last_message(log))
        return self._keep(Link(self.name, ptr))

    def attach_sockmap(self, sockmap: Map) -> Link:
        """Attach an sk_msg or sk_skb program to a sockmap or sockhash map, as its section
        says (`SEC("sk_msg")`, `SEC("sk_skb/stream_verdict")`, `SEC("sk_skb/stream_parser")`,
        `SEC("sk_skb/verdict")`): it runs for the sockets put in that map. Made with
        bpf_prog_attach: 6.1 has no BPF link for it (Linux commit 699c23f02c65, v6.10,
        added one), so its `Link.fd` raises NoLinkFd; `close()` detaches it.
        """
        self._obj.check_open(f"program {self.name}")
        what = f"cannot attach {self.name} to map {sockmap.name}"
        kind = lib.bpf_program__expected_attach_type(self._ptr)
        if self.type not in ("sk_msg", "sk_skb") or kind not in _SOCKMAP_ATTACH:
            raise AttachError(
                errno.EINVAL,
                what,
                f'it is a {self.type} program from SEC("{self.section}"); sockmap programs '
                'come from SEC("sk_msg") or SEC("sk_skb/stream_verdict"), '
                'SEC("sk_skb/stream_parser"), SEC("sk_skb/verdict")',
            )
        prog_fd, map_fd = self.fd, sockmap.fd
        rc = lib.bpf_prog_attach(prog_fd, map_fd, kind, 0)
        if rc < 0:
            err = -rc
            hint = ROOT_HINT if err in PERMISSION else ""
            if err == errno.EINVAL:
                hint = f"map {sockmap.name} must be a sockmap or sockhash (BPF_MAP_TYPE_SOCKMAP)"
            raise AttachError(err, what, hint)
        link = SockmapLink(
            self.name, sockmap.name, lambda: lib.bpf_prog_detach2(prog_fd, map_fd, kind)
        )
        return self._keep(link)

    def attach_perf_event(
        self, event: str = "cpu-clock", *, frequency: int = 99, cpus: Iterable[int] | None = None
    ) -> Link:
        """Attach a perf_event program (`SEC("perf_event")`) to a sampling event on each of
        `cpus` (default: every online CPU), as `bpftool`/`perf` users do: it runs at
        about `frequency` samples a second per CPU. `event`: one of `PERF_EVENTS`
        (software "cpu-clock" works in any VM; "cycles" needs a PMU). One link per
        CPU behind one `Link`, so its `fd` raises NoLinkFd where there are several.
        """
        from pytest_lbr.kernel import perf

        self._obj.check_open(f"program {self.name}")
        what = f"cannot attach {self.name} to perf event {event}"
        if self.type != "perf_event":
            raise AttachError(
                errno.EINVAL,
                what,
                f'it is a {self.type} program from SEC("{self.section}"), not perf_event '
                '(SEC("perf_event") makes one)',
            )
        if event not in PERF_EVENTS:
            raise AttachError(errno.EINVAL, what, f"events: {', '.join(PERF_EVENTS)}")
        attr = perf.perf_event_attr()
        attr.size = ctypes.sizeof(attr)
        attr.type, attr.config = PERF_EVENTS[event]
        attr.sample_period = frequency  # sample_freq, with the freq flag
        attr.flags = _PERF_FREQ
        links: list[int] = []

        def destroy() -> None:
            for ptr in links:
                lib.bpf_link__destroy(ptr)

        try:
            for cpu in perf.online_cpus() if cpus is None else cpus:
                try:
                    pfd = perf.perf_event_open(attr, -1, cpu)
                except OSError as exc:
                    err = exc.errno or errno.EINVAL
                    hint = ROOT_HINT if err in PERMISSION else ""
                    if err in (errno.ENOENT, errno.EOPNOTSUPP):
                        hint = 'no such event on this machine; "cpu-clock" is a software event'
                    raise AttachError(err, f"{what} on CPU {cpu}", hint) from None
                ptr = lib.bpf_program__attach_perf_event(self._ptr, pfd)
                if not ptr:
                    err = ctypes.get_errno() or errno.EINVAL
                    os.close(pfd)
                    raise AttachError(err, f"{what} on CPU {cpu}")
                links.append(ptr)  # the link owns the event's fd from here
        except AttachError:
            destroy()
            raise
        link = (
            Link(self.name, links[0]) if len(links) == 1 else PerCpuLink(self.name, detach=destroy)
        )
        return self._keep(link)

    def _keep(self, link: LinkT) -> LinkT:
        self._obj.keep_link(link)
        return link

    def _require(self, kind: str, section: str, mode: str) -> None:
        self._obj.check_open(f"program {self.name}")
        if self.type != kind:
            raise AttachError(
                errno.EINVAL,
                f"cannot attach {self.name} as {mode}",
                f'it is a {self.type} program, not {kind} (SEC("{section}") makes one)',
            )

    def attach_xdp(
        self, interface: str | int, *, mode: str = "auto", netns: str | None = None
    ) -> XdpLink:
        """Attach this XDP program to a network interface (name or index), for real:
        packets the interface receives run it. `mode`: "driver" (the driver's native
        XDP, in its NAPI poll), "generic" (the kernel's skb path, any interface) or
        "auto" (driver where the driver has it). `netns`: the named network namespace
        (`ip netns`) the interface is in; None for this one.

        A BPF link (the kernel detaches it when its fd closes, so a crashed test leaves
        nothing attached): `XdpLink.close()` detaches, and so does closing the object.
        """
        if mode not in XDP_MODES:
            raise ValueError(f"unknown XDP mode {mode!r}; expected one of {', '.join(XDP_MODES)}")
        self._require("xdp", "xdp", f"XDP ({mode} mode)")
        prog_fd = self.fd

        def attach() -> tuple[int, str, int]:
            ifindex, ifname = interface_index(interface, netns)
            what = f"cannot attach {self.name} to {interface_words(ifname, netns)} as XDP ({mode} mode)"
            opts = BpfLinkCreateOpts(sz=ctypes.sizeof(BpfLinkCreateOpts), flags=XDP_MODES[mode])
            fd = lib.bpf_link_create(prog_fd, ifindex, BPF_XDP, ctypes.byref(opts))
            if fd < 0:
                err = -fd if fd != -1 else (ctypes.get_errno() or errno.EPERM)
                raise AttachError(err, what, XDP_HINTS.get(err, ""))
            return ifindex, ifname, fd

        ifindex, ifname, fd = call_in(netns, attach)
        return self._keep(XdpLink(self.name, fd, ifname, ifindex, netns, mode))

    def attach_tc(
        self, interface: str | int, *, direction: str = "ingress", netns: str | None = None
    ) -> TcLink:
        """Attach this tc (sched_cls) program to a network interface's clsact hook, for
        real, as a direct-action filter: "ingress" runs it on what the interface
        receives, "egress" on what it sends. The clsact qdisc is created if the
        interface has none, and removed again with the last of our filters on it.
        `netns`: the named network namespace the interface is in; None for this one.

        `TcLink.close()` removes the filter (so does closing the object). Unlike an XDP
        link, a tc filter outlives a process that dies without closing it: the `veth`
        fixture's interfaces take theirs with them.
        """
        if direction not in TC_DIRECTIONS:
            raise ValueError(
                f"unknown tc direction {direction!r}; expected one of {', '.join(TC_DIRECTIONS)}"
            )
        self._require("sched_cls", "tc", f"a tc {direction} filter")
        prog_fd = self.fd
        attach = lambda: tc_attach(self.name, prog_fd, interface, netns, direction)  # noqa: E731
        ifname, ifindex, handle, priority = call_in(netns, attach)
        return self._keep(TcLink(self.name, ifname, ifindex, netns, direction, handle, priority))

    def attach_usdt(
        self,
        binary: str | os.PathLike[str],
        provider: str,
        name: str,
        pid: int | None = None,
        *,
        cookie: int = 0,
    ) -> Link:
        """Attach this `SEC("usdt")` program to USDT probe `provider:name` of `binary`
        (`DTRACE_PROBE2(provider, name, ...)`), in process `pid` or every process running
        it (None); `cookie` is what `bpf_usdt_cookie()` reads (`pytest_lbr.bpf.usdt`)."""
        from pytest_lbr.bpf.usdt import attach_usdt

        return attach_usdt(self, binary, provider, name, pid, cookie=cookie)

    def __repr__(self) -> str:
        return f"<Program {self.name} id={self.id} tag={self.tag} type={self.type}>"


def _read_iter(fd: int, what: str) -> bytes:
    """One read(2) of an iterator's fd: the next bytes the program wrote, b"" at the end."""
    try:
        return os.read(fd, 1 << 16)
    except OSError as exc:
        err = exc.errno or errno.EIO
        raise AttachError(err, f"{what}: read failed", _ITER_HINTS.get(err, "")) from None
