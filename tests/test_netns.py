"""Real attachment on the host (no tracing needed): veth pairs in a new network
namespace (`pytest_lbr.bpf.netns`, the `veth` fixture) and XDP / tc programs attached
to them (`Program.attach_xdp`, `Program.attach_tc`), with real packets through them.

Every test checks that what it made is gone afterwards: interfaces (`ip -j link`),
named namespaces (`ip netns list`), BPF links (`bpftool link`), clsact qdiscs.
Needs root; skipped otherwise. The BPF objects are the examples' (make -C examples).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from pytest_lbr.bpf import AttachError, BpfLoader, TcLink, XdpLink
from pytest_lbr.bpf.netns import NetnsError, VethPair, call_in, cleanup_stale, netns_list
from tests.bpf.objects import require_root

pytest_plugins = ["pytester"]

# `clean` compares machine-wide state (interfaces, namespaces, BPF links) before and
# after each test: nothing else may run beside this module's tests, or one sees the
# other's namespace come and go. ci/test runs `-m machine_state` on its own: xdist's
# `xdist_group` no longer keeps a group on one worker under pytest 9 (pytest-xdist 3.8
# sets `item._nodeid`, which pytest 9's nodes no longer read).
pytestmark = pytest.mark.machine_state

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PORT = 4242  # examples/veth_xdp/veth_xdp.bpf.c counts UDP packets to this port
GOOD = 0
EF = 46  # DSCP "expedited forwarding"


def example_object(name: str) -> Path:
    """examples/NAME/build/NAME.bpf.o, built with make if missing."""
    obj = EXAMPLES / name / "build" / f"{name}.bpf.o"
    if not obj.exists():
        if shutil.which("clang") is None:
            pytest.skip(f"{obj} is not built and clang is missing (run bash ci/setup)")
        subprocess.run(["make", "-s", "-C", str(EXAMPLES)], check=True)
    return obj


def ip_json(*args: str) -> list[dict]:
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


def state() -> dict[str, object]:
    """What a test could leave behind: interfaces, named namespaces, BPF links."""
    links = subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {
        "interfaces": sorted(link["ifname"] for link in ip_json("link", "show")),
        "netns": sorted(netns.stdout.split()),
        "bpf_links": sorted(entry["id"] for entry in json.loads(links.stdout or "[]")),
    }


def qdiscs(ifname: str, netns: str | None = None) -> list[str]:
    argv = ["tc", "-j"] + (["-n", netns] if netns else []) + ["qdisc", "show", "dev", ifname]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [q["kind"] for q in json.loads(out or "[]")]


@pytest.fixture
def clean() -> Iterator[dict[str, object]]:
    """Root, and the machine's state before the test; asserts it is the same after."""
    require_root()
    if shutil.which("ip") is None:
        pytest.skip("iproute2's ip is not installed")
    before = state()
    yield before
    assert state() == before


@pytest.fixture
def pair(clean) -> Iterator[VethPair]:
    with VethPair.create() as p:
        yield p


@pytest.fixture
def loader(clean) -> Iterator[BpfLoader]:
    with BpfLoader() as bpf:
        yield bpf


def counted(obj) -> int:
    value = obj.maps["counts"].lookup(GOOD)
    return 0 if value is None else struct.unpack("<Q", value)[0]


def send_and_receive(tx: socket.socket, rx: socket.socket, addr: str, n: int) -> list[bytes]:
    rx.settimeout(5)
    for i in range(n):
        tx.sendto(b"packet %d" % i, (addr, PORT))
    return [rx.recv(64) for _ in range(n)]


# -- the pair ------------------------------------------------------------------------


def test_a_pair_is_up_with_addresses_and_removed_after(clean) -> None:
    with VethPair.create() as pair:
        (host,) = ip_json("addr", "show", "dev", pair.host.name)
        assert "UP" in host["flags"] and host["address"] == pair.host.mac
        assert [a["local"] for a in host["addr_info"]] == [pair.host.addr]  # no IPv6
        assert pair.netns in netns_list()
        (peer,) = ip_json("-n", pair.netns, "addr", "show", "dev", "eth0")
        assert "UP" in peer["flags"] and [a["local"] for a in peer["addr_info"]] == [pair.peer.addr]
        assert pair.peer.ifindex == peer["ifindex"] and pair.peer.netns == pair.netns
        assert pair.host.ifindex == socket.if_nametoindex(pair.host.name)
        # Both directions carry packets.
        with closing(pair.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
            rx.bind((pair.host.addr, PORT))
            assert send_and_receive(tx, rx, pair.host.addr, 2) == [b"packet 0", b"packet 1"]
        out = pair.run(["ip", "-br", "link", "show", "eth0"], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.startswith("eth0@")
        assert repr(pair).endswith(" up>")
    assert pair.closed
    pair.close()  # idempotent


def test_two_pairs_do_not_collide(clean) -> None:
    with VethPair.create() as a, VethPair.create() as b:
        assert a.netns != b.netns and a.host.name != b.host.name
        assert len({a.host.addr, a.peer.addr, b.host.addr, b.peer.addr}) == 4


def test_call_in_runs_in_the_namespace_and_leaves_ours_alone(pair: VethPair) -> None:
    ours = os.readlink("/proc/thread-self/ns/net")
    theirs = pair.call(lambda: os.readlink("/proc/thread-self/ns/net"))
    assert theirs != ours and os.readlink("/proc/thread-self/ns/net") == ours
    assert pair.call(lambda: sorted(socket.if_nameindex())[-1][1]) == "eth0"

    def fails() -> None:
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        pair.call(fails)
    with pytest.raises(NetnsError, match="no network namespace 'nope'"):
        call_in("nope", lambda: None)


def test_stale_names_of_a_dead_session_are_removed(clean) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns, ifname = f"pytest-lbr-{dead.pid}-0", f"lbr{dead.pid}.0"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "link", "add", ifname, "type", "veth", "peer", "name", "x"], check=True)
    try:
        assert sorted(cleanup_stale()) == sorted([ifname, ns])
    finally:
        subprocess.run(["ip", "link", "del", ifname], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# -- XDP -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["driver", "generic", "auto"])
def test_xdp_counts_real_packets(pair: VethPair, loader: BpfLoader, mode: str) -> None:
    obj = loader.load(example_object("veth_xdp"))
    prog = obj.programs["veth_xdp"]
    links_before: list[int] = state()["bpf_links"]  # type: ignore[assignment]
    with prog.attach_xdp(pair.host.name, mode=mode) as link:
        assert isinstance(link, XdpLink) and link.ifindex == pair.host.ifindex
        # veth has native XDP: "auto" is the driver's.
        assert link.attached_mode == ("driver" if mode == "auto" else mode)
        assert state()["bpf_links"] == sorted([*links_before, link.id])
        with closing(pair.socket()) as tx, closing(socket.socket(type=socket.SOCK_DGRAM)) as rx:
            rx.bind((pair.host.addr, PORT))
            got = send_and_receive(tx, rx, pair.host.addr, 5)
    assert got == [b"packet %d" % i for i in range(5)]  # XDP_PASS: the stack got them all
    assert counted(obj) == 5
    assert link.closed and link.attached_mode == "none"
    assert state()["bpf_links"] == links_before
    link.close()  # idempotent


def test_xdp_in_the_namespace(pair: VethPair, loader: BpfLoader) -> None:
    obj = loader.load(example_object("veth_xdp"))
    link = obj.programs["veth_xdp"].attach_xdp("eth0", mode="driver", netns=pair.netns)
    assert link.attached_mode == "driver" and link.ifindex == pair.peer.ifindex
    assert "eth0 (netns pytest-lbr-" in repr(link)
    with closing(socket.socket(type=socket.SOCK_DGRAM)) as tx, closing(pair.socket()) as rx:
        rx.bind((pair.peer.addr, PORT))
        send_and_receive(tx, rx, pair.peer.addr, 3)
    assert counted(obj) == 3
    link.close()
    assert link.attached_mode == "none"


def test_xdp_by_index_and_closed_with_its_object(pair: VethPair, loader: BpfLoader) -> None:
    obj = loader.load(example_object("veth_xdp"))
    link = obj.programs["veth_xdp"].attach_xdp(pair.host.ifindex, mode="generic")
    assert link.interface == pair.host.name
    obj.close()
    assert link.closed and link.attached_mode == "none"


def test_xdp_link_survives_the_interface_going(clean, loader: BpfLoader) -> None:
    obj = loader.load(example_object("veth_xdp"))
    with VethPair.create() as pair:
        link = obj.programs["veth_xdp"].attach_xdp(pair.host.name)
    assert link.attached_mode == "none"
    link.close()  # the interface took the program with it: closing is still fine


def test_xdp_errors_are_one_line(pair: VethPair, loader: BpfLoader) -> None:
    prog = loader.load(example_object("veth_xdp")).programs["veth_xdp"]
    with prog.attach_xdp(pair.host.name, mode="driver"):
        with pytest.raises(AttachError) as busy:
            prog.attach_xdp(pair.host.name, mode="driver")
        assert busy.value.errno in (errno.EBUSY, errno.EEXIST)
        assert "another XDP program is attached there" in str(busy.value)
    with pytest.raises(AttachError, match="use mode='generic'") as nodrv:
        prog.attach_xdp("lo", mode="driver", netns=pair.netns)  # loopback: no native XDP
    assert nodrv.value.errno == errno.EOPNOTSUPP
    assert f"cannot attach veth_xdp to lo (netns {pair.netns}) as XDP (driver mode)" in str(
        nodrv.value
    )
    with pytest.raises(AttachError, match="no network interface 'nope0'"):
        prog.attach_xdp("nope0")
    with pytest.raises(AttachError, match=f"no network interface 'nope0' in netns {pair.netns}"):
        prog.attach_xdp("nope0", netns=pair.netns)
    with pytest.raises(AttachError, match="no network interface with index 99999"):
        prog.attach_xdp(99999)
    with pytest.raises(ValueError, match="unknown XDP mode 'native'; expected one of auto, driver"):
        prog.attach_xdp(pair.host.name, mode="native")
    with pytest.raises(NetnsError, match="no network namespace 'nope'"):
        prog.attach_xdp("eth0", netns="nope")
    tc = loader.load(example_object("tc_classifier")).programs["tc_classifier"]
    with pytest.raises(AttachError, match=r"it is a sched_cls program, not xdp \(SEC\(\"xdp\"\)"):
        tc.attach_xdp(pair.host.name)
    with pytest.raises(AttachError, match=r"it is a xdp program, not sched_cls \(SEC\(\"tc\"\)"):
        prog.attach_tc(pair.host.name)
    for err in (busy.value, nodrv.value):
        assert "\n" not in str(err)


# -- tc ------------------------------------------------------------------------------


def recv_tos(rx: socket.socket) -> int:
    """The TOS byte of the next datagram (IP_RECVTOS)."""
    rx.settimeout(5)
    _, anc, _, _ = rx.recvmsg(64, socket.CMSG_SPACE(1))
    ((level, kind, data),) = anc
    assert (level, kind) == (socket.IPPROTO_IP, socket.IP_TOS)
    return data[0]


@pytest.fixture
def classifier(loader: BpfLoader):
    obj = loader.load(example_object("tc_classifier"))
    # classes[PORT] = { classid 1:10, DSCP EF }: the program re-marks what it sees.
    obj.maps["classes"].update(struct.pack("<H", PORT), struct.pack("<IB3x", 0x10010, EF))
    return obj.programs["tc_classifier"]


@pytest.mark.parametrize("direction", ["ingress", "egress"])
def test_tc_remarks_real_packets(pair: VethPair, classifier, direction: str) -> None:
    # ingress on the host end sees what the namespace sends; egress, what we send.
    if direction == "ingress":
        link = classifier.attach_tc(pair.host.name, direction="ingress")
        tx, rx, dst = pair.socket(), socket.socket(type=socket.SOCK_DGRAM), pair.host.addr
    else:
        link = classifier.attach_tc(pair.host.name, direction="egress")
        tx, rx, dst = socket.socket(type=socket.SOCK_DGRAM), pair.socket(), pair.peer.addr
    assert isinstance(link, TcLink) and link.priority > 0 and link.handle > 0
    assert qdiscs(pair.host.name).count("clsact") == 1
    with closing(tx), closing(rx):
        rx.bind((dst, PORT))
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        tx.sendto(b"marked", (dst, PORT))
        assert recv_tos(rx) >> 2 == EF
        link.close()
        assert "clsact" not in qdiscs(pair.host.name)  # we made it, we removed it
        tx.sendto(b"not marked", (dst, PORT))
        assert recv_tos(rx) == 0
    link.close()


def test_tc_in_the_namespace_both_directions(pair: VethPair, classifier) -> None:
    ingress = classifier.attach_tc("eth0", direction="ingress", netns=pair.netns)
    egress = classifier.attach_tc("eth0", direction="egress", netns=pair.netns)
    filters = subprocess.run(
        ["tc", "-n", pair.netns, "filter", "show", "dev", "eth0", "egress"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "tc_classifier" in filters and "direct-action" in filters
    ingress.close()
    assert qdiscs("eth0", pair.netns).count("clsact") == 1  # egress still uses it
    egress.close()
    assert "clsact" not in qdiscs("eth0", pair.netns)


def test_tc_leaves_a_clsact_it_did_not_make(pair: VethPair, classifier) -> None:
    subprocess.run(["tc", "qdisc", "add", "dev", pair.host.name, "clsact"], check=True)
    with classifier.attach_tc(pair.host.name):
        pass
    assert qdiscs(pair.host.name).count("clsact") == 1
    filters = subprocess.run(
        ["tc", "filter", "show", "dev", pair.host.name, "ingress"], capture_output=True, text=True
    )
    assert filters.stdout == ""


def test_tc_filter_gone_with_its_interface(clean, classifier) -> None:
    with VethPair.create() as pair:
        link = classifier.attach_tc(pair.host.name, direction="egress")
    link.close()  # no interface, no filter: nothing to do, no error
    assert link.closed


# -- the fixture, seen from a user's run -----------------------------------------------


def test_fixture_cleans_up_after_a_failing_test(clean, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            import socket

            def test_fails(veth, bpf):
                xdp = bpf.load({str(example_object("veth_xdp"))!r}).programs["veth_xdp"]
                tc = bpf.load({str(example_object("tc_classifier"))!r}).programs["tc_classifier"]
                xdp.attach_xdp(veth.host.name, mode="driver")
                tc.attach_tc("eth0", direction="egress", netns=veth.netns)
                veth.socket().sendto(b"x", (veth.host.addr, 4242))
                assert socket.if_nametoindex(veth.host.name) == veth.host.ifindex
                assert False, "the test fails with everything attached"

            def test_error_is_one_line(veth, bpf):
                bpf.load({str(example_object("veth_xdp"))!r}).programs["veth_xdp"].attach_xdp(
                    "nope0")
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    # One at a time: pytest-randomly (installed for the guests) orders the two tests.
    result.stdout.fnmatch_lines(["*the test fails with everything attached*"])
    result.stdout.fnmatch_lines(
        [
            "*test_fixture_cleans_up_after_a_failing_test.py:*: AttachError: *"
            "no network interface 'nope0': No such device"
        ]
    )
