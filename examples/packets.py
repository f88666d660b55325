"""Packet builders for the example tests: just enough Ethernet/IPv4/UDP/TCP/VXLAN.

Real header layouts with real checksums, so the BPF programs parse them exactly
as they would parse packets off the wire.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["eth", "ip_checksum", "ipv4", "tcp", "udp", "vxlan"]

ETH_P_IP = 0x0800
IPPROTO_TCP = 6
IPPROTO_UDP = 17


def eth(
    payload: bytes,
    *,
    src: str = "02:00:00:00:00:01",
    dst: str = "02:00:00:00:00:02",
    proto: int = ETH_P_IP,
) -> bytes:
    """An Ethernet II frame around `payload`."""
    mac = lambda s: bytes.fromhex(s.replace(":", ""))  # noqa: E731
    return mac(dst) + mac(src) + struct.pack("!H", proto) + payload


def ip_checksum(header: bytes) -> int:
    """The Internet checksum (RFC 1071) of an IPv4 header."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(
    payload: bytes,
    *,
    src: str = "192.0.2.1",
    dst: str = "198.51.100.1",
    proto: int = IPPROTO_UDP,
    tos: int = 0,
    ttl: int = 64,
) -> bytes:
    """An IPv4 packet (20-byte header, valid checksum) around `payload`."""
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        tos,
        20 + len(payload),
        1,
        0,
        ttl,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    csum = ip_checksum(header)
    return header[:10] + struct.pack("!H", csum) + header[12:] + payload


def udp(payload: bytes, *, sport: int = 40000, dport: int = 53) -> bytes:
    """A UDP datagram (checksum 0: optional over IPv4)."""
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp(payload: bytes = b"", *, sport: int = 40000, dport: int = 443, flags: int = 0x02) -> bytes:
    """A TCP segment with a 20-byte header (SYN by default; checksum left 0)."""
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 65535, 0, 0) + payload


def vxlan(inner_frame: bytes, *, vni: int = 42) -> bytes:
    """A VXLAN header (RFC 7348, I flag set) and the inner Ethernet frame."""
    return struct.pack("!II", 0x08000000, vni << 8) + inner_frame
