"""Network namespaces and veth pairs for tests that attach programs for real: the object
behind the `veth` fixture.

    pair = VethPair.create()      # a veth pair, one end in a new network namespace
    pair.host.name, pair.host.addr    # "lbr4242.0", "198.18.x.1" (this namespace)
    pair.peer.name, pair.peer.addr    # "eth0", "198.18.x.2" (namespace pair.netns)
    tx = pair.socket()            # a UDP socket made in the namespace
    tx.sendto(b"x", (pair.host.addr, 4242))   # -> peer -> host end's receive path
    pair.run(["ping", "-c1", pair.host.addr])  # a command in the namespace (ip netns exec)
    pair.close()                  # interfaces and namespace gone (idempotent)

Everything is made with iproute2's `ip` (argument lists, no shell). Code runs in the
namespace in one of two ways: a subprocess under `ip netns exec` (`run`, `popen`),
or a short-lived thread of this process that joined the namespace with setns(2)
(`call_in`: a socket made there stays in the namespace when the thread ends, so
`socket()` hands back a socket this thread can use). Switching a thread's network
namespace never affects the other threads.

Names carry this process's id (namespace `pytest-lbr-<pid>-<n>`, host-side interface
`lbr<pid>.<n>`), so concurrent sessions (pytest-xdist workers) never collide, and a
session that was killed leaves names the next one recognises and removes
(`cleanup_stale`). Both ends have IPv6 off and a permanent neighbour entry for the
other end, so the only packets on the pair are the ones a test sends: no router or
neighbour solicitations, no ARP.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_lbr.errors import UserError

__all__ = [
    "NETNS_RUN_DIR",
    "End",
    "NetnsError",
    "VethPair",
    "call_in",
    "cleanup_stale",
    "ip",
    "netns_list",
]

#: Where `ip netns add` keeps a named namespace (a bind mount of its nsfs file).
NETNS_RUN_DIR = Path("/run/netns")
NETNS_PREFIX = "pytest-lbr"
_NETNS_RE = re.compile(rf"^{NETNS_PREFIX}-(?P<pid>\d+)-\d+$")
_IFNAME_RE = re.compile(r"^lbr(?P<pid>\d+)\.\d+$")
#: The name of the namespace's end of every pair (as a container's interface).
PEER_IFNAME = "eth0"
#: 198.18.0.0/15 (RFC 2544, benchmarking): addresses no real network routes.
_NET_BASE = (198 << 24) | (18 << 16)
_NET_SLOTS = 1 << 15  # /30 subnets in a /15
_CLONE_NEWNET = 0x40000000

_T = TypeVar("_T")
_counter = itertools.count()
_cleaned = False


class NetnsError(UserError, RuntimeError):
    """A namespace or veth pair could not be made, entered or removed; one line saying why."""


def _require_ip() -> str:
    path = shutil.which("ip")
    if path is None:
        raise NetnsError("iproute2's `ip` is not installed (Debian: apt-get install iproute2)")
    return path


def ip(*args: str, netns: str | None = None, stdin: str | None = None) -> str:
    """Run `ip [-n NETNS] ARGS...`; its stdout, or NetnsError with its message."""
    argv = [_require_ip()]
    if netns is not None:
        argv += ["-n", netns]
    argv += list(args)
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shown = " ".join(argv[1:])
        why = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
        raise NetnsError(f"`ip {shown}` failed: {why}")
    return proc.stdout


def _setns(fd: int) -> None:
    setns = getattr(os, "setns", None)  # Python >= 3.12
    if setns is not None:
        setns(fd, _CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def call_in(netns: str | None, fn: Callable[[], _T]) -> _T:
    """`fn()` run in network namespace `netns` (None: here), in a thread of its own.

    The thread joins the namespace with setns(2) and ends after `fn`; whatever `fn`
    creates there (sockets, BPF links on its interfaces) stays in that namespace.
    `fn`'s exception is raised here.
    """
    if netns is None:
        return fn()
    path = NETNS_RUN_DIR / netns
    out: list[Any] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise NetnsError(
                    f"no network namespace {netns!r} ({path} does not exist)"
                ) from None
            try:
                _setns(fd)
            except OSError as exc:
                raise NetnsError(
                    f"cannot enter network namespace {netns!r}: {exc.strerror}"
                ) from None
            finally:
                os.close(fd)
            out.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=body, name=f"netns {netns}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]  # type: ignore[no-any-return]


def netns_list() -> list[str]:
    """Names of the named network namespaces (as `ip netns list` shows them)."""
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def cleanup_stale() -> list[str]:
    """Remove the namespaces and host-side interfaces of sessions that died without
    tearing down; returns what was removed. Those of live processes are left alone."""
    removed: list[str] = []
    for name in sorted(os.listdir("/sys/class/net")):
        m = _IFNAME_RE.match(name)
        if m and not _alive(int(m["pid"])):
            try:
                ip("link", "del", name)
                removed.append(name)
            except NetnsError:
                pass  # gone meanwhile (its peer's namespace went first)
    for ns in netns_list():
        m = _NETNS_RE.match(ns)
        if m and not _alive(int(m["pid"])):
            try:
                ip("netns", "del", ns)
                removed.append(ns)
            except NetnsError:
                pass
    return removed


@dataclass(frozen=True)
class End:
    """One end of a veth pair: its interface name, index, IPv4 address, MAC address,
    and the network namespace it is in (None: this process's)."""

    name: str
    ifindex: int
    addr: str
    mac: str
    netns: str | None = None


def _ipv4(value: int) -> str:
    return socket.inet_ntoa(value.to_bytes(4, "big"))


def _used_ipv4() -> set[str]:
    import json

    out = json.loads(ip("-j", "-4", "addr", "show") or "[]")
    return {a["local"] for link in out for a in link.get("addr_info", []) if "local" in a}


def _subnet(pid: int, n: int) -> tuple[str, str]:
    """A /30 of 198.18.0.0/15 no interface here uses: (host address, peer address)."""
    used = _used_ipv4()
    start = (pid * 16 + n) % _NET_SLOTS
    for k in range(_NET_SLOTS):
        base = _NET_BASE + 4 * ((start + k) % _NET_SLOTS)
        host, peer = _ipv4(base + 1), _ipv4(base + 2)
        if host not in used and peer not in used:
            return host, peer
    raise NetnsError("no free /30 left in 198.18.0.0/15 for a veth pair")


def _load_veth() -> None:
    """Load the veth driver if it is a module not loaded yet. The kernel would load it on
    demand, but not always: in the 6.1 guest `ip link add ... type veth` failed with
    "Unknown device type" until something ran modprobe."""
    if os.path.isdir("/sys/module/veth") or shutil.which("modprobe") is None:
        return
    subprocess.run(["modprobe", "-q", "veth"], capture_output=True, check=False)


def _disable_ipv6(ifname: str) -> None:
    path = Path("/proc/sys/net/ipv6/conf", ifname, "disable_ipv6")
    if path.exists():  # not where the kernel runs without IPv6
        path.write_text("1\n")


class VethPair:
    """A veth pair: `host` in this network namespace, `peer` (named eth0) in the new
    namespace `netns`, both up with an IPv4 /30 of 198.18.0.0/15. A context manager;
    `close()` removes the pair and the namespace (and with them every qdisc, filter,
    XDP program and address on them)."""

    def __init__(self, netns: str, host: End, peer: End) -> None:
        self.netns = netns
        self.host = host
        self.peer = peer
        self._closed = False

    @classmethod
    def create(cls) -> VethPair:
        """Make the namespace and the pair; NetnsError (one line) if it cannot be done."""
        global _cleaned
        _require_ip()
        if os.geteuid() != 0:
            raise NetnsError(
                "a veth pair in a new network namespace needs root (CAP_NET_ADMIN and "
                "CAP_SYS_ADMIN): run as root, or in a `pytest-lbr vm` guest"
            )
        if not _cleaned:
            cleanup_stale()
            _cleaned = True
        pid, n = os.getpid(), next(_counter)
        netns, host_if = f"{NETNS_PREFIX}-{pid}-{n}", f"lbr{pid}.{n}"
        host_mac, peer_mac = (
            f"02:6c:62:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}:{i:02x}" for i in (1, 2)
        )
        host_addr, peer_addr = _subnet(pid, n)
        _load_veth()
        ip("netns", "add", netns)
        pair = cls(
            netns,
            End(host_if, 0, host_addr, host_mac),
            End(PEER_IFNAME, 0, peer_addr, peer_mac, netns),
        )
        try:
            ip(
                "link",
                "add",
                host_if,
                "address",
                host_mac,
                "type",
                "veth",
                "peer",
                "name",
                PEER_IFNAME,
                "address",
                peer_mac,
                "netns",
                netns,
            )
            _disable_ipv6(host_if)
            call_in(netns, lambda: _disable_ipv6(PEER_IFNAME))
            ip(
                "-b",
                "-",
                stdin=(
                    f"addr add {host_addr}/30 dev {host_if}\n"
                    f"neigh replace {peer_addr} lladdr {peer_mac} dev {host_if} nud permanent\n"
                    f"link set {host_if} up\n"
                ),
            )
            ip(
                "-b",
                "-",
                netns=netns,
                stdin=(
                    "link set lo up\n"
                    f"addr add {peer_addr}/30 dev {PEER_IFNAME}\n"
                    f"neigh replace {host_addr} lladdr {host_mac} dev {PEER_IFNAME} nud permanent\n"
                    f"link set {PEER_IFNAME} up\n"
                ),
            )
            pair.host = End(host_if, socket.if_nametoindex(host_if), host_addr, host_mac)
            peer_index = call_in(netns, lambda: socket.if_nametoindex(PEER_IFNAME))
            pair.peer = End(PEER_IFNAME, peer_index, peer_addr, peer_mac, netns)
        except BaseException:
            pair.close()
            raise
        return pair

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, fn: Callable[[], _T]) -> _T:
        """`fn()` run in the namespace (a thread of this process; see `call_in`)."""
        return call_in(self.netns, fn)

    def socket(
        self, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM, proto: int = 0
    ) -> socket.socket:
        """A socket made in the namespace (default: UDP over IPv4); usable from any thread,
        it sends and receives through the peer end. Close it (or use `with`)."""
        return self.call(lambda: socket.socket(family, type, proto))

    def _exec_argv(self, argv: Sequence[str]) -> list[str]:
        return [_require_ip(), "netns", "exec", self.netns, *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """`subprocess.run(argv)` in the namespace (`ip netns exec NS argv...`)."""
        return subprocess.run(self._exec_argv(argv), **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen(argv)` in the namespace (`ip netns exec NS argv...`)."""
        return subprocess.Popen(self._exec_argv(argv), **kwargs)

    def close(self) -> None:
        """Remove the pair and the namespace (idempotent). Deleting the host end deletes
        both ends at once (with their qdiscs, filters and XDP programs); the namespace
        goes after it, so nothing waits for the kernel's asynchronous namespace cleanup."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        if os.path.exists(f"/sys/class/net/{self.host.name}"):
            try:
                ip("link", "del", self.host.name)
            except NetnsError as exc:
                errors.append(str(exc))
        if self.netns in netns_list():
            try:
                ip("netns", "del", self.netns)
            except NetnsError as exc:
                errors.append(str(exc))
        if errors:
            raise NetnsError("; ".join(errors))

    def __enter__(self) -> VethPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "up"
        return (
            f"<VethPair {self.host.name} ({self.host.addr}) <-> {self.netns}:{self.peer.name} "
            f"({self.peer.addr}) {state}>"
        )
