"""The `bpf` harness: load BPF objects, run and attach their programs, for tests.

`from pytest_lbr.bpf import BpfLoader, BpfObject, Program, VethPair, ...` is the harness's
public face (the `bpf` and `veth` fixtures' classes); they live in `harness.py` (objects)
and `program.py` (programs) and are imported on first use, so that the package's lower
pieces load without them: `libbpf.py` (ctypes bindings to
libbpf.so.1, every prototype and option struct but `bpf_prog_load`'s; no C extension),
`netns.py` (veth pairs and network namespaces for tests), `links.py` (links), `attach.py`
(attachments libbpf 1.1 cannot make), `usdt.py` (USDT probes), `maps.py` (maps),
`counted.py` (programs loaded again with a counter per block: exact coverage). Tested by
tests/test_harness.py, test_bpf_attach.py, test_netns.py, tests/coverage/test_exact.py,
and in the guests by tests/conformance/.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_lbr.bpf.harness import (
        PERF_EVENTS,
        TC_DIRECTIONS,
        XDP_MODES,
        AttachError,
        BpfLoader,
        BpfLoadError,
        BpfObject,
        BpfObjectNotFound,
        FdLink,
        Link,
        Map,
        NoLinkFd,
        NotABpfObject,
        PerCpuLink,
        Program,
        RunResult,
        SockmapLink,
        TcLink,
        XdpLink,
    )
    from pytest_lbr.bpf.netns import VethPair

__all__ = [
    "TC_DIRECTIONS",
    "XDP_MODES",
    "AttachError",
    "BpfLoadError",
    "BpfLoader",
    "BpfObject",
    "BpfObjectNotFound",
    "FdLink",
    "Link",
    "Map",
    "NoLinkFd",
    "NotABpfObject",
    "PERF_EVENTS",
    "PerCpuLink",
    "Program",
    "RunResult",
    "SockmapLink",
    "TcLink",
    "VethPair",
    "XdpLink",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'pytest_lbr.bpf' has no attribute {name!r}")
    module = "netns" if name == "VethPair" else "harness"
    return getattr(importlib.import_module(f"pytest_lbr.bpf.{module}"), name)
