"""A session's fexit hook on a newly loaded program is loaded again from its first
hook's image (`capture/hooks/tracer_maps.py`: `TracerImage`): the same program as libbpf's load
gives the kernel, recording the same returns, and nothing left when it closes."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.bpf.libbpf import (
    bpf_func_info,
    bpf_line_info,
    bpf_link_info,
    check_int,
    lib,
    prog_info,
)
from pytest_lbr.capture.hooks.hook_set import HookSet
from pytest_lbr.capture.hooks.tracer_maps import TracerMaps
from pytest_lbr.targets import parse_targets
from tests.bpf.objects import XDP_PASS, bpf_object
from tests.kernel.kernel_state import bpf_ids

pytestmark = pytest.mark.kernel

PASS = bytes(range(1, 65))


def _hook_program(hooks: HookSet) -> dict[str, Any]:
    """What the kernel says of the one program `hooks` attached (but its id and maps)."""
    (link_fd,) = hooks.link_fds
    link = bpf_link_info()
    size = ctypes.c_uint32(ctypes.sizeof(link))
    check_int(lib.bpf_obj_get_info_by_fd(link_fd, ctypes.byref(link), ctypes.byref(size)), "link")
    fd = check_int(lib.bpf_prog_get_fd_by_id(link.prog_id), "program of the link")
    try:
        head, _ = prog_info(fd)
        info, bufs = prog_info(
            fd,
            func_info=("nr_func_info", head.nr_func_info, bpf_func_info),
            line_info=("nr_line_info", head.nr_line_info, bpf_line_info),
        )
    finally:
        os.close(fd)
    return {
        "tag": bytes(info.tag).hex(),
        "name": info.name,
        "type": info.type,
        "xlated": info.xlated_prog_len,
        "jited": info.jited_prog_len,
        "maps": info.nr_map_ids,
        "attach_btf_id": info.attach_btf_id,
        "func_info": [(f.insn_off, f.type_id) for f in bufs["func_info"]],
        "line_info": [(li.insn_off, li.file_name_off, li.line_off, li.line_col)
                      for li in bufs["line_info"]],
    }  # fmt: skip


def test_a_hook_loaded_again_is_the_program_libbpf_loads() -> None:
    before = {kind: bpf_ids(kind) for kind in ("prog", "link", "map")}
    maps = TracerMaps()
    images = maps.images
    try:
        with BpfLoader() as loader:
            first = loader.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
            with HookSet(parse_targets([first]), snapshot=False, maps=maps):
                pass  # libbpf's load: remembered, its maps lent to the next set
            assert images.loads == 0
            # The next test's program: loaded anew, so a hook of its own.
            prog = loader.load(bpf_object("xdp_helpers")).programs["xdp_helpers"]
            targets = parse_targets([prog])
            with (
                HookSet(targets, snapshot=False, maps=maps) as again,
                HookSet(targets, snapshot=False) as libbpf_hook,
            ):
                assert images.loads == 1
                assert _hook_program(again) == _hook_program(libbpf_hook)
                assert prog.run(data=PASS).retval == XDP_PASS
                got = [(raw.retval, raw.target) for raw in again.drain()]
                assert got == [(r.retval, r.target) for r in libbpf_hook.drain()]
                assert got == [(XDP_PASS, 0)]
                assert again.lost == 0
    finally:
        maps.close()
    # Nothing of its own left behind (what another test's hook let go meanwhile is not ours).
    assert {kind: bpf_ids(kind) - ids for kind, ids in before.items()} == {
        kind: set() for kind in before
    }
