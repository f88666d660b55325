"""Attachments of loaded BPF programs that libbpf 1.1 (Debian 12's) cannot make by
itself, and the program types it has no section names for: what `Program` gets
from `NetAttach`.

    prog.attach_tcx("eth0", direction="ingress")   # SEC("tcx/ingress"): a tcx link (>= 6.6)
    prog.attach_netns("blue")                      # SEC("sk_lookup"), SEC("flow_dissector")
    prog.attach_netfilter("local_in", pf="ipv4")   # SEC("netfilter"): a netfilter link (>= 6.4)

libbpf 1.1 leaves a program of a section it does not know (`SEC("netfilter")`,
`SEC("tcx/ingress")`: libbpf 1.2 and 1.3 added them) without a type, and the load
fails; `prepare_sections` gives them the type and expected attach type a newer
libbpf would, between open and load. A tcx link is `bpf_link_create` with the uapi
attach type (libbpf 1.1 passes it through); a netfilter link needs options libbpf 1.1's
`bpf_link_create` has no field for, so it goes to bpf(2) itself.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Protocol

from pytest_lbr.bpf.libbpf import (
    BPF_LINK_CREATE,
    BPF_NETFILTER,
    BPF_PROG_TYPE_NETFILTER,
    BPF_PROG_TYPE_SCHED_CLS,
    BPF_TCX_EGRESS,
    BPF_TCX_INGRESS,
    NetfilterLinkCreateAttr,
    check_int,
    lib,
    libbpf_messages,
    sys_bpf,
)
from pytest_lbr.bpf.links import (
    AttachError,
    Link,
    LinkT,
    interface_index,
    interface_words,
    last_message,
    link_id,
)
from pytest_lbr.bpf.netns import NETNS_RUN_DIR, call_in

__all__ = [
    "NETFILTER_FAMILIES",
    "NETFILTER_HOOKS",
    "NEWER_PROG_TYPES",
    "NEWER_SECTIONS",
    "TCX_DIRECTIONS",
    "FdLink",
    "NetAttach",
    "netfilter_link_attr",
    "netns_path",
    "prepare_sections",
]

#: Sections libbpf 1.1 does not know -> (uapi program type, expected attach type), as
#: libbpf 1.2 (netfilter) and 1.3 (tcx) define them.
NEWER_SECTIONS = {
    "netfilter": (BPF_PROG_TYPE_NETFILTER, BPF_NETFILTER),
    "tcx/ingress": (BPF_PROG_TYPE_SCHED_CLS, BPF_TCX_INGRESS),
    "tcx/egress": (BPF_PROG_TYPE_SCHED_CLS, BPF_TCX_EGRESS),
}
#: Names of the program types libbpf 1.1's libbpf_bpf_prog_type_str does not have.
NEWER_PROG_TYPES = {BPF_PROG_TYPE_NETFILTER: "netfilter"}
#: `Program.attach_tcx(direction=...)`: the uapi attach type of the tcx link.
TCX_DIRECTIONS = {"ingress": BPF_TCX_INGRESS, "egress": BPF_TCX_EGRESS}
#: `Program.attach_netfilter(hook, pf=...)`: uapi enum nf_inet_hooks and NFPROTO_*.
NETFILTER_HOOKS = {"prerouting": 0, "local_in": 1, "forward": 2, "local_out": 3, "postrouting": 4}
NETFILTER_FAMILIES = {"ipv4": 2, "ipv6": 10}
_NF_IP_PRI_FIRST, _NF_IP_PRI_LAST = -(2**31), 2**31 - 1  # the kernel keeps these for itself
_BPF_F_NETFILTER_IP_DEFRAG = 1  # Linux >= 6.6
_UNSPEC = 0  # BPF_PROG_TYPE_UNSPEC: libbpf found no type in the section name
_PERMISSION = (errno.EPERM, errno.EACCES)
_ROOT_HINT = "attaching needs root (CAP_BPF with CAP_NET_ADMIN, or CAP_SYS_ADMIN)"
_TCX_HINTS = {
    errno.EINVAL: "the kernel refused a tcx link: tcx came with Linux 6.6 (before it, "
    "prog.attach_tc(interface) attaches the same program as a tc filter)",
    errno.EEXIST: "this program is attached there already",
}
_NETFILTER_HINTS = {
    errno.EINVAL: "the kernel refused a netfilter link: netfilter links came with Linux 6.4",
    errno.EAFNOSUPPORT: "pf must be ipv4 or ipv6",
    errno.EPROTO: "no such hook",
    errno.ERANGE: "the kernel keeps the first and last priorities for itself",
    errno.EOPNOTSUPP: "this kernel has no such netfilter link flag (defrag: Linux >= 6.6)",
}
_NETNS_HINTS = {
    errno.EEXIST: "one is attached to that namespace already (a flow dissector: one per "
    "namespace, and one in the root namespace stops the others)",
    errno.EINVAL: "the kernel refused this program on a network namespace",
}


def prepare_sections(obj_ptr: int) -> None:
    """Between bpf_object__open and __load: give each program libbpf left without a type
    (a section this libbpf does not know) the type of `NEWER_SECTIONS`, if it is there."""
    p = lib.bpf_object__next_program(obj_ptr, None)
    while p:
        section = (lib.bpf_program__section_name(p) or b"").decode()
        if lib.bpf_program__type(p) == _UNSPEC and section in NEWER_SECTIONS:
            prog_type, attach_type = NEWER_SECTIONS[section]
            check_int(lib.bpf_program__set_type(p, prog_type), f"set type of {section}")
            check_int(
                lib.bpf_program__set_expected_attach_type(p, attach_type),
                f"set expected attach type of {section}",
            )
        p = lib.bpf_object__next_program(obj_ptr, p)


def netns_path(netns: str | os.PathLike[str] | None) -> str:
    """Where a network namespace's nsfs file is: None -> this thread's, a name -> the one
    `ip netns add NAME` made (/run/netns/NAME), a path (with a "/") -> itself."""
    if netns is None:
        return "/proc/thread-self/ns/net"
    text = os.fspath(netns)
    if not text:
        raise ValueError("empty network namespace name: give a name, a path or None")
    return text if "/" in text else str(NETNS_RUN_DIR / text)


def netfilter_link_attr(
    prog_fd: int, hook: str, pf: str, priority: int, defrag: bool = False
) -> NetfilterLinkCreateAttr:
    """The BPF_LINK_CREATE attribute of a netfilter link; ValueError (one line) for a hook,
    family or priority the kernel would refuse."""
    if hook not in NETFILTER_HOOKS:
        raise ValueError(
            f"unknown netfilter hook {hook!r}; expected one of {', '.join(NETFILTER_HOOKS)}"
        )
    if pf not in NETFILTER_FAMILIES:
        raise ValueError(
            f"unknown netfilter family {pf!r}; expected one of {', '.join(NETFILTER_FAMILIES)}"
        )
    if not _NF_IP_PRI_FIRST < priority < _NF_IP_PRI_LAST:
        raise ValueError(
            f"netfilter priority {priority} out of range: the kernel keeps {_NF_IP_PRI_FIRST} and "
            f"{_NF_IP_PRI_LAST} (and beyond) for itself"
        )
    return NetfilterLinkCreateAttr(
        prog_fd=prog_fd,
        attach_type=BPF_NETFILTER,
        pf=NETFILTER_FAMILIES[pf],
        hooknum=NETFILTER_HOOKS[hook],
        priority=priority,
        netfilter_flags=_BPF_F_NETFILTER_IP_DEFRAG if defrag else 0,
    )


class FdLink(Link):
    """A BPF link made without libbpf's `struct bpf_link` (a tcx or netfilter link): its
    fd, closed to detach. `where` says what it is attached to."""

    def __init__(self, program: str, fd: int, where: str) -> None:
        super().__init__(program, detach=lambda: os.close(fd))
        self._fd = fd
        self.where = where
        #: Kernel link id (as in `bpftool link show`).
        self.id: int = link_id(fd)

    def _link_fd(self) -> int:
        return self._fd

    def __repr__(self) -> str:
        state = "closed" if self.closed else "attached"
        return f"<FdLink {self.program} on {self.where} {state}>"


class _Prog(Protocol):
    """What `NetAttach` uses of a `pytest_lbr.bpf.Program`."""

    name: str
    _ptr: int

    @property
    def fd(self) -> int: ...

    @property
    def type(self) -> str: ...

    @property
    def section(self) -> str: ...

    def _keep(self, link: LinkT) -> LinkT: ...

    def _require(self, kind: str, section: str, mode: str) -> None: ...


class NetAttach:
    """`Program`'s attach calls for tcx, network namespaces and netfilter."""

    def attach_tcx(
        self: _Prog, interface: str | int, *, direction: str = "ingress", netns: str | None = None
    ) -> FdLink:
        """Attach a sched_cls program (`SEC("tcx/ingress")`, `SEC("tcx/egress")`, or
        `SEC("tc")`) to an interface as a tcx BPF link (Linux >= 6.6): "ingress" runs it
        on what the interface receives, "egress" on what it sends; no qdisc involved.
        `netns`: the named namespace the interface is in. AttachError (one line) when the
        kernel refuses (before 6.6: Invalid argument)."""
        if direction not in TCX_DIRECTIONS:
            raise ValueError(
                f"unknown tcx direction {direction!r}; expected one of {', '.join(TCX_DIRECTIONS)}"
            )
        self._require("sched_cls", f"tcx/{direction}", f"a tcx {direction} link")
        prog_fd, name = self.fd, self.name

        def attach() -> tuple[str, int]:
            ifindex, ifname = interface_index(interface, netns)
            what = f"cannot attach {name} to {interface_words(ifname, netns)} as a tcx {direction} link"
            fd = lib.bpf_link_create(prog_fd, ifindex, TCX_DIRECTIONS[direction], None)
            if fd < 0:
                err = -fd if fd != -1 else (ctypes.get_errno() or errno.EPERM)
                hint = _ROOT_HINT if err in _PERMISSION else _TCX_HINTS.get(err, "")
                raise AttachError(err, what, hint)
            return f"{interface_words(ifname, netns)} tcx {direction}", fd

        where, fd = call_in(netns, attach)
        return self._keep(FdLink(name, fd, where))

    def attach_netns(self: _Prog, netns: str | os.PathLike[str] | None = None) -> Link:
        """Attach an sk_lookup or flow_dissector program (`SEC("sk_lookup")`,
        `SEC("flow_dissector")`) to a network namespace as a BPF link
        (`bpf_program__attach_netns`): None is this thread's namespace, a name one of
        `ip netns list` (the `veth` fixture's `veth.netns`), a path an nsfs file.
        AttachError (one line) when the kernel refuses."""
        path = netns_path(netns)
        what = f"cannot attach {self.name} to network namespace {netns or 'of this thread'}"
        if self.type not in ("sk_lookup", "flow_dissector"):
            raise AttachError(
                errno.EINVAL,
                what,
                f'it is a {self.type} program from SEC("{self.section}"); network namespace '
                'programs come from SEC("sk_lookup") or SEC("flow_dissector")',
            )
        prog_ptr = self._ptr
        _ = self.fd  # the object is still open
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise AttachError(
                exc.errno or errno.ENOENT, what, f"no {path}: give a name of `ip netns list`"
            ) from None
        try:
            with libbpf_messages() as log:
                ptr = lib.bpf_program__attach_netns(prog_ptr, fd)
                err = ctypes.get_errno() or errno.EINVAL
        finally:
            os.close(fd)
        if not ptr:
            hint = (
                _ROOT_HINT if err in _PERMISSION else _NETNS_HINTS.get(err, "") or last_message(log)
            )
            raise AttachError(err, what, hint)
        return self._keep(Link(self.name, ptr))

    def attach_netfilter(
        self: _Prog,
        hook: str = "local_in",
        *,
        pf: str = "ipv4",
        priority: int = 0,
        defrag: bool = False,
        netns: str | None = None,
    ) -> FdLink:
        """Attach a netfilter program (`SEC("netfilter")`, Linux >= 6.4) to a netfilter
        hook of a network namespace as a BPF link: `hook` one of `NETFILTER_HOOKS`
        ("local_in": packets delivered to this host), `pf` "ipv4" or "ipv6", `priority`
        among the hook's other functions (lower runs first; iptables' filter table is 0),
        `defrag` to see reassembled packets (Linux >= 6.6). `netns`: the named namespace
        (None: this one). AttachError (one line) when the kernel refuses."""
        attr = netfilter_link_attr(self.fd, hook, pf, priority, defrag)
        self._require("netfilter", "netfilter", f"a netfilter {pf} {hook} hook")
        where = f"netfilter {pf} {hook} priority {priority}" + (
            "" if netns is None else f" (netns {netns})"
        )
        fd = call_in(netns, lambda: sys_bpf(BPF_LINK_CREATE, attr))
        if fd < 0:
            err = -fd
            hint = _ROOT_HINT if err in _PERMISSION else _NETFILTER_HINTS.get(err, "")
            raise AttachError(err, f"cannot attach {self.name} to {where}", hint)
        return self._keep(FdLink(self.name, fd, where))
