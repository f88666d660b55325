"""The pure parts of `pytest_lbr.bpf.attach`: the netfilter link's bpf_attr as the
kernel reads it (uapi linux/bpf.h, `link_create.netfilter` at offset 16), the argument
checks made before any syscall, where a named namespace is, and the section table."""

from __future__ import annotations

import ctypes
import struct

import pytest

from pytest_lbr.bpf.attach import (
    NETFILTER_HOOKS,
    NEWER_PROG_TYPES,
    NEWER_SECTIONS,
    TCX_DIRECTIONS,
    netfilter_link_attr,
    netns_path,
)
from pytest_lbr.bpf.libbpf import NetfilterLinkCreateAttr
from pytest_lbr.bpf.program import _ATTACH_WITH


def test_the_netfilter_link_attr_is_the_uapi_layout() -> None:
    # union bpf_attr.link_create: prog_fd, target_fd, attach_type, flags, then
    # netfilter { __u32 pf; __u32 hooknum; __s32 priority; __u32 flags; } at 16.
    assert ctypes.sizeof(NetfilterLinkCreateAttr) == 32
    offsets = {name: getattr(NetfilterLinkCreateAttr, name).offset for name, _ in
               NetfilterLinkCreateAttr._fields_}  # fmt: skip
    assert offsets == {
        "prog_fd": 0,
        "target_fd": 4,
        "attach_type": 8,
        "flags": 12,
        "pf": 16,
        "hooknum": 20,
        "priority": 24,
        "netfilter_flags": 28,
    }
    attr = netfilter_link_attr(7, "local_in", "ipv4", -100)
    assert struct.unpack("<4I2IiI", bytes(attr)) == (7, 0, 45, 0, 2, 1, -100, 0)
    attr = netfilter_link_attr(3, "postrouting", "ipv6", 5, defrag=True)
    assert struct.unpack("<4I2IiI", bytes(attr)) == (3, 0, 45, 0, 10, 4, 5, 1)


@pytest.mark.parametrize(
    ("hook", "pf", "priority", "message"),
    [
        (
            "input",
            "ipv4",
            0,
            r"unknown netfilter hook 'input'; expected one of prerouting, local_in",
        ),
        ("local_in", "inet", 0, r"unknown netfilter family 'inet'; expected one of ipv4, ipv6"),
        ("local_in", "ipv4", -(2**31), r"priority -2147483648 out of range"),
        ("local_in", "ipv4", 2**31 - 1, r"priority 2147483647 out of range"),
    ],
)
def test_netfilter_arguments_the_kernel_would_refuse_are_one_line(
    hook: str, pf: str, priority: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        netfilter_link_attr(3, hook, pf, priority)


def test_hook_numbers_are_enum_nf_inet_hooks() -> None:
    assert list(NETFILTER_HOOKS.items()) == [
        ("prerouting", 0), ("local_in", 1), ("forward", 2), ("local_out", 3), ("postrouting", 4)
    ]  # fmt: skip


def test_a_namespace_is_this_thread_a_name_or_a_path() -> None:
    assert netns_path(None) == "/proc/thread-self/ns/net"
    assert netns_path("blue") == "/run/netns/blue"
    assert netns_path("/proc/1/ns/net") == "/proc/1/ns/net"
    with pytest.raises(ValueError, match="empty network namespace name"):
        netns_path("")


def test_sections_libbpf_1_1_lacks_get_the_uapi_types() -> None:
    # BPF_PROG_TYPE_NETFILTER 32 / BPF_NETFILTER 45; SCHED_CLS 3 / BPF_TCX_INGRESS 46, EGRESS 47.
    assert NEWER_SECTIONS == {
        "netfilter": (32, 45),
        "tcx/ingress": (3, 46),
        "tcx/egress": (3, 47),
    }
    assert TCX_DIRECTIONS == {"ingress": 46, "egress": 47}
    assert NEWER_PROG_TYPES == {32: "netfilter"}


def test_attach_names_the_call_for_each_new_family() -> None:
    assert _ATTACH_WITH["tcx"] == "use prog.attach_tcx(interface)"
    assert (
        _ATTACH_WITH["sk_lookup"]
        == _ATTACH_WITH["flow_dissector"]
        == ("use prog.attach_netns(netns)")
    )
    assert _ATTACH_WITH["netfilter"] == "use prog.attach_netfilter(hook)"


@pytest.mark.parametrize(
    ("name", "section", "types"),
    [("netfilter", "netfilter", (32, 45)), ("tcx", "tcx/ingress", (3, 46))],
)
def test_opening_gives_sections_libbpf_lacks_their_types(
    name: str, section: str, types: tuple[int, int]
) -> None:
    """Opened, not loaded (no privileges needed): libbpf 1.1 leaves the program without a
    type, and `prepare_sections` gives it the one a newer libbpf would."""
    from pathlib import Path

    from pytest_lbr.bpf.attach import prepare_sections
    from pytest_lbr.bpf.libbpf import lib

    path = Path(__file__).resolve().parent / "conformance" / "build" / f"{name}.bpf.o"
    if not path.exists():
        pytest.skip(f"{path} not built: run `make -C tests/conformance`")
    obj = lib.bpf_object__open_file(bytes(path), None)
    assert obj
    try:
        prog = lib.bpf_object__next_program(obj, None)
        assert lib.bpf_program__section_name(prog).decode() == section
        prepare_sections(obj)
        got = (lib.bpf_program__type(prog), lib.bpf_program__expected_attach_type(prog))
        assert got == types
    finally:
        lib.bpf_object__close(obj)
