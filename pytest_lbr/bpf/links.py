"""Attachments of loaded BPF programs (`pytest_lbr.bpf`): the `Link` a program's
attach call returns, and the links that are no BPF link (a tc filter, a sockmap
attachment, per-CPU perf events), with what attaching to an interface takes
(XDP and tc through libbpf, in a network namespace where one is named).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from pytest_lbr.bpf.libbpf import (
    BPF_TC_EGRESS,
    BPF_TC_INGRESS,
    XDP_ATTACHED_MODES,
    BpfError,
    BpfTcHook,
    BpfTcOpts,
    BpfXdpQueryOpts,
    bpf_link_info,
    check_int,
    lib,
    libbpf_messages,
)
from pytest_lbr.bpf.netns import call_in
from pytest_lbr.errors import UserError

__all__ = [
    "TC_DIRECTIONS",
    "XDP_HINTS",
    "AttachError",
    "Link",
    "LinkT",
    "interface_index",
    "interface_words",
    "last_message",
    "link_id",
    "tc_attach",
    "NoLinkFd",
    "PerCpuLink",
    "SockmapLink",
    "TcLink",
    "XdpLink",
]


#: `Program.attach_tc(direction=...)`: the clsact hook the filter goes on.
TC_DIRECTIONS = {"ingress": BPF_TC_INGRESS, "egress": BPF_TC_EGRESS}


def link_id(fd: int) -> int:
    """The kernel's id of the BPF link `fd` (as `bpftool link show` lists it)."""
    info = bpf_link_info()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    check_int(lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "link info")
    return int(info.id)


class AttachError(UserError, BpfError):
    """`attach_xdp` / `attach_tc` / `iterate` could not attach or run: one line naming
    the program, where (an interface and namespace), the kernel's errno and, where it
    is known, what to do."""

    def __init__(self, err: int, what: str, hint: str = "") -> None:
        super().__init__(err, what)
        if hint:
            self.strerror = f"{what}: {os.strerror(err)}: {hint}"
            self.args = (err, self.strerror)


class NoLinkFd(UserError, AttributeError):
    """`Link.fd` of an attachment the kernel keeps no BPF link for (a tc filter):
    one line saying why. An AttributeError, so `hasattr(link, "fd")` is False."""


class Link:
    """An attachment of a `Program`; a context manager. `close()` detaches (idempotent)."""

    def __init__(
        self, program: str, ptr: int | None = None, *, detach: Callable[[], object] | None = None
    ) -> None:
        #: The attached program's name (a link does not keep its object alive).
        self.program = program
        self._ptr = ptr  # libbpf's struct bpf_link (None: attached some other way)
        if ptr is not None:
            detach = lambda: lib.bpf_link__destroy(ptr)  # noqa: E731
        self._detach: Callable[[], object] | None = detach

    @property
    def closed(self) -> bool:
        return self._detach is None

    @property
    def fd(self) -> int:
        """The kernel BPF link's fd (libbpf's `bpf_link__fd`), owned by this link: do not
        close it. For a perf-event attachment (kprobe, tracepoint, uprobe) on a kernel
        without BPF perf links (< 5.15) libbpf's fd is the perf event's. Raises NoLinkFd
        (an AttributeError) where there is none (a tc filter), ValueError once closed.
        """
        if self.closed:
            raise ValueError(f"link of {self.program} is closed: it has no fd any more")
        return self._link_fd()

    def _link_fd(self) -> int:
        if self._ptr is None:
            raise NoLinkFd(f"link of {self.program} has no fd: it was not made as a BPF link")
        return check_int(lib.bpf_link__fd(self._ptr), f"fd of the link of {self.program}")

    def close(self) -> None:
        """Detach (idempotent: only the first call does anything, even if it failed)."""
        detach, self._detach = self._detach, None
        if detach is not None:
            detach()

    def __enter__(self: LinkT) -> LinkT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.program} {'closed' if self.closed else 'attached'}>"


LinkT = TypeVar("LinkT", bound=Link)


class SockmapLink(Link):
    """An sk_msg / sk_skb program attached to a sockmap (`Program.attach_sockmap`)."""

    def __init__(self, program: str, sockmap: str, detach: Callable[[], object]) -> None:
        super().__init__(program, detach=detach)
        #: The map's name.
        self.sockmap = sockmap

    def _link_fd(self) -> int:
        raise NoLinkFd(
            f"{self.program} on map {self.sockmap} has no link fd: it was attached with "
            "bpf_prog_attach (sockmap links came in Linux 6.10)"
        )


class PerCpuLink(Link):
    """A perf_event program attached on several CPUs (`Program.attach_perf_event`)."""

    def _link_fd(self) -> int:
        raise NoLinkFd(f"{self.program} has one perf-event link per CPU, so no single fd")


class XdpLink(Link):
    """An XDP program attached to an interface (`Program.attach_xdp`): a BPF link."""

    def __init__(
        self, program: str, fd: int, interface: str, ifindex: int, netns: str | None, mode: str
    ) -> None:
        super().__init__(program, detach=lambda: os.close(fd))
        self._fd = fd
        #: The interface's name and index, and the namespace it is in (None: this one).
        self.interface = interface
        self.ifindex = ifindex
        self.netns = netns
        #: The mode asked for: "auto", "driver" or "generic" (`attached_mode`: the kernel's).
        self.mode = mode
        #: Kernel link id (as in `bpftool link show`).
        self.id: int = link_id(fd)

    @property
    def attached_mode(self) -> str:
        """How the interface runs an XDP program now, as the kernel says (netlink):
        "driver", "generic", "hw", "multi", or "none" (nothing attached, or no interface)."""

        def query() -> int:
            opts = BpfXdpQueryOpts(sz=ctypes.sizeof(BpfXdpQueryOpts))
            try:
                socket.if_indextoname(self.ifindex)
            except OSError:
                return 0  # the interface is gone, and the program with it
            check_int(lib.bpf_xdp_query(self.ifindex, 0, ctypes.byref(opts)), "bpf_xdp_query")
            return int(opts.attach_mode)

        mode = call_in(self.netns, query)
        return XDP_ATTACHED_MODES.get(mode, str(mode))

    def _link_fd(self) -> int:
        return self._fd  # the BPF link attach_xdp made with bpf_link_create

    def __repr__(self) -> str:
        state = "closed" if self.closed else "attached"
        return f"<XdpLink {self.program} on {interface_words(self.interface, self.netns)} ({self.mode}) {state}>"


class TcLink(Link):
    """A tc program attached to an interface's clsact hook (`Program.attach_tc`)."""

    def __init__(
        self,
        program: str,
        interface: str,
        ifindex: int,
        netns: str | None,
        direction: str,
        handle: int,
        priority: int,
    ) -> None:
        super().__init__(
            program,
            detach=lambda: call_in(
                netns, lambda: _tc_detach(program, ifindex, netns, direction, handle, priority)
            ),
        )
        self.interface = interface
        self.ifindex = ifindex
        self.netns = netns
        #: "ingress" or "egress".
        self.direction = direction
        #: The filter's handle and priority (`tc filter show dev IF ingress`: pref, handle).
        self.handle = handle
        self.priority = priority

    def _link_fd(self) -> int:
        raise NoLinkFd(
            f"a tc filter has no link fd: {self.program} on {interface_words(self.interface, self.netns)} "
            f"{self.direction} is a netlink filter (bpf_tc_attach), not a BPF link; "
            f"it is known by handle {self.handle:#x} and priority {self.priority}"
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else "attached"
        where = interface_words(self.interface, self.netns)
        return f"<TcLink {self.program} on {where} {self.direction} {state}>"


def interface_words(ifname: str, netns: str | None) -> str:
    """An interface as messages name it: "veth0", or "veth0 (netns lbr-ns)"."""
    return ifname if netns is None else f"{ifname} (netns {netns})"


def interface_index(interface: str | int, netns: str | None) -> tuple[int, str]:
    """(ifindex, name) of an interface of the calling thread's namespace."""
    where = "" if netns is None else f" in netns {netns}"
    if isinstance(interface, int):
        try:
            return interface, socket.if_indextoname(interface)
        except OSError:
            raise AttachError(
                errno.ENODEV, f"no network interface with index {interface}{where}"
            ) from None
    try:
        return socket.if_nametoindex(interface), interface
    except OSError:
        raise AttachError(errno.ENODEV, f"no network interface {interface!r}{where}") from None


XDP_HINTS = {
    errno.EOPNOTSUPP: "the driver has no native XDP: use mode='generic' (or 'auto')",
    errno.EBUSY: "another XDP program is attached there: detach it first",
    errno.EEXIST: "another XDP program is attached there (in another mode): detach it first",
    errno.EPERM: "attaching needs root (CAP_NET_ADMIN and CAP_BPF)",
    errno.EINVAL: "the kernel refused this program or mode on that interface",
}

#: The clsact qdiscs our tc filters created: (netns, ifindex) -> how many of our
#: filters are on it. The last one to go removes the qdisc; a qdisc someone else
#: made is never removed.
_clsact: dict[tuple[str | None, int], int] = {}
_clsact_lock = threading.Lock()
_GONE = (errno.ENODEV, errno.ENOENT, errno.ENXIO)


def _tc_hook(ifindex: int, attach_point: int) -> BpfTcHook:
    return BpfTcHook(sz=ctypes.sizeof(BpfTcHook), ifindex=ifindex, attach_point=attach_point)


def tc_attach(
    program: str, prog_fd: int, interface: str | int, netns: str | None, direction: str
) -> tuple[str, int, int, int]:
    """In the interface's namespace: the clsact hook (made if missing), then the filter."""
    ifindex, ifname = interface_index(interface, netns)
    what = f"cannot attach {program} to {interface_words(ifname, netns)} as a tc {direction} filter"
    key = (netns, ifindex)
    hook = _tc_hook(ifindex, TC_DIRECTIONS[direction])
    with _clsact_lock, libbpf_messages() as log:
        ret = lib.bpf_tc_hook_create(ctypes.byref(hook))
        if ret < 0 and ret != -errno.EEXIST:
            raise AttachError(-ret, f"{what}: cannot create its clsact qdisc", last_message(log))
        if ret == 0:
            _clsact[key] = 0
        opts = BpfTcOpts(sz=ctypes.sizeof(BpfTcOpts), prog_fd=prog_fd)
        ret = lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
        if ret < 0:
            _release_clsact(key, ifindex)
            raise AttachError(-ret, what, last_message(log))
        if key in _clsact:
            _clsact[key] += 1
    return ifname, ifindex, int(opts.handle), int(opts.priority)


def _tc_detach(
    program: str, ifindex: int, netns: str | None, direction: str, handle: int, priority: int
) -> None:
    """In the interface's namespace: the filter goes, then the clsact qdisc if it was
    ours and this was our last filter on it. An interface already gone is no error."""
    key = (netns, ifindex)
    hook = _tc_hook(ifindex, TC_DIRECTIONS[direction])
    opts = BpfTcOpts(sz=ctypes.sizeof(BpfTcOpts), handle=handle, priority=priority)
    with _clsact_lock, libbpf_messages() as log:
        ret = lib.bpf_tc_detach(ctypes.byref(hook), ctypes.byref(opts))
        if key in _clsact:
            _clsact[key] -= 1
            _release_clsact(key, ifindex)
        if ret < 0 and -ret not in _GONE:
            where = interface_words(str(ifindex), netns)
            raise AttachError(
                -ret, f"cannot detach {program}'s tc filter from {where}", last_message(log)
            )


def _release_clsact(key: tuple[str | None, int], ifindex: int) -> None:
    """Remove the clsact qdisc at `key` if we made it and none of our filters is left."""
    if _clsact.get(key) == 0:
        del _clsact[key]
        both = _tc_hook(ifindex, BPF_TC_INGRESS | BPF_TC_EGRESS)
        lib.bpf_tc_hook_destroy(ctypes.byref(both))  # gone with its interface: fine too


def last_message(log: list[str]) -> str:
    """libbpf's last message (for tc: the kernel's netlink error text), one line."""
    return " ".join(log[-1].split()) if log else ""
