"""The `bpf` harness against the real kernel: load, test-run, maps, errors, cleanup,
link fds and iterator programs.

Runs on any host where root may load BPF programs (BPF_PROG_TEST_RUN and task
iterators need no tracing); skipped with the reason otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_lbr.bpf import (
    AttachError,
    BpfLoader,
    BpfLoadError,
    BpfObject,
    NoLinkFd,
    RunResult,
    TcLink,
)
from pytest_lbr.bpf.libbpf import BpfError, bpf_link_info, check_int, lib, libbpf_messages
from tests.bpf.objects import (
    LAST_CPU,
    LAST_CSUM,
    XDP_DROP,
    XDP_HELPERS_DROP_BYTE,
    XDP_HELPERS_HDR,
    XDP_PASS,
    bpf_object,
    require_root,
)


@pytest.fixture
def loader():
    require_root()
    with BpfLoader() as bpf:
        yield bpf


@pytest.fixture
def obj(loader):
    return loader.load(bpf_object("xdp_helpers"))


def udp_packet(payload: bytes = b"hello, xdp") -> bytes:
    """A real Ethernet + IPv4 + UDP frame (the first byte is the MAC's, 0x02)."""
    eth = bytes.fromhex("02aabbccddee0211223344550800")
    ip_len = 20 + 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 1, 0, 64, 17, 0, b"\n\0\0\1", b"\n\0\0\2")
    udp = struct.pack("!HHHH", 12345, 53, 8 + len(payload), 0)
    return eth + ip + udp + payload


def fold(value: int) -> int:
    """Fold a one's-complement sum to 16 bits."""
    while value >> 16:
        value = (value & 0xFFFF) + (value >> 16)
    return value


def folded_csum(data: bytes) -> int:
    """One's-complement sum of `data` as native (little-endian) 16-bit words, folded."""
    return fold(sum(struct.unpack(f"<{len(data) // 2}H", data)))


def u64(value: bytes | None) -> int:
    assert value is not None
    return int.from_bytes(value, "little")


def kallsyms_names() -> set[str]:
    with open("/proc/kallsyms") as f:
        return {line.split()[2] for line in f if "[bpf]" in line}


def test_load_lists_programs_and_maps(obj):
    assert set(obj.programs) == {"xdp_helpers", "xdp_cpu", "xdp_lru", "xdp_pass_with_a_long_name"}
    assert set(obj.maps) == {"counts", "last", "recent"}
    prog = obj.programs["xdp_helpers"]
    assert prog.name == "xdp_helpers"
    assert prog.type == "xdp"
    assert prog.fd >= 0
    other = obj.programs["xdp_cpu"]
    assert prog.id > 0 and other.id > 0 and prog.id != other.id
    assert len(prog.tag) == 16 and int(prog.tag, 16) >= 0
    # The kernel names JITed programs bpf_prog_<tag>_<name>: proves id/tag are the live ones.
    assert f"bpf_prog_{prog.tag}_{prog.name}" in kallsyms_names()
    counts = obj.maps["counts"]
    assert (counts.key_size, counts.value_size, counts.max_entries) == (4, 8, 256)


def test_run_passes_packet_and_strips_header(obj):
    prog = obj.programs["xdp_helpers"]
    pkt = udp_packet()
    res = prog.run(data=pkt)
    assert isinstance(res, RunResult)
    assert res.retval == XDP_PASS
    # bpf_xdp_adjust_head() moved the start: data_out is the packet minus the header.
    assert res.data == pkt[XDP_HELPERS_HDR:]
    assert res.duration_ns >= 0
    # bpf_csum_diff() over the header, stored by the program.
    assert fold(u64(obj.maps["last"].lookup(LAST_CSUM))) == folded_csum(pkt[:XDP_HELPERS_HDR])
    # The hash map counted one packet under its first byte.
    assert obj.maps["counts"].lookup(pkt[0]) == (1).to_bytes(8, "little")
    assert dict(obj.maps["counts"].items()) == {
        pkt[0].to_bytes(4, "little"): (1).to_bytes(8, "little")
    }


def test_verdict_depends_on_packet(obj):
    prog = obj.programs["xdp_helpers"]
    drop = bytes([XDP_HELPERS_DROP_BYTE]) + udp_packet()[1:]
    res = prog.run(drop, repeat=5)
    assert res.retval == XDP_DROP
    assert res.data == drop  # a dropped packet is not adjusted
    # repeat=5 ran the program five times: the lookup-then-increment path counted them.
    assert u64(obj.maps["counts"].lookup(XDP_HELPERS_DROP_BYTE)) == 5
    assert prog.run(udp_packet()).retval == XDP_PASS


def test_ctx_round_trip(obj):
    # struct xdp_md { data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex }
    pkt = udp_packet()
    ctx = struct.pack("<6I", 0, len(pkt), 0, 0, 0, 0)
    res = obj.programs["xdp_helpers"].run(pkt, ctx=ctx)
    assert res.retval == XDP_PASS
    assert res.ctx is not None and len(res.ctx) == len(ctx)
    # The kernel reports the adjusted packet in ctx_out too.
    assert struct.unpack("<6I", res.ctx)[1] == len(pkt) - XDP_HELPERS_HDR


def test_helper_program_writes_cpu(obj):
    last = obj.maps["last"]
    last.update(LAST_CPU, 0xDEAD)
    res = obj.programs["xdp_cpu"].run(b"\0" * 14)
    assert res.retval == XDP_PASS
    cpu = u64(last.lookup(LAST_CPU))
    assert cpu != 0xDEAD
    assert 0 <= cpu < lib.libbpf_num_possible_cpus()


def test_map_update_lookup_delete(obj):
    counts = obj.maps["counts"]
    assert counts.lookup(7) is None
    counts.update(7, 42)
    counts.update(b"\x08\0\0\0", (43).to_bytes(8, "little"))
    assert counts.lookup(b"\x07\0\0\0") == (42).to_bytes(8, "little")
    assert sorted(u64(k) for k, _ in counts.items()) == [7, 8]
    assert counts.delete(7) is True
    assert counts.delete(7) is False
    assert counts.lookup(7) is None
    with pytest.raises(ValueError, match="key is 2 bytes, the map's is 4"):
        counts.lookup(b"\0\0")
    with pytest.raises(ValueError, match="does not fit in 4 bytes"):
        counts.update(1 << 40, 1)
    with pytest.raises(BpfError) as info:
        obj.maps["last"].delete(0)  # array elements cannot be deleted
    assert info.value.errno == errno.EINVAL


def test_unknown_program_lists_what_exists(obj):
    with pytest.raises(KeyError, match="no program 'xdp_nope' in xdp_helpers.bpf.o; it has: "):
        obj.programs["xdp_nope"]
    with pytest.raises(KeyError, match="it has: counts, last"):
        obj.maps["nope"]


def test_missing_file(loader, tmp_path):
    with pytest.raises(FileNotFoundError, match="BPF object not found") as info:
        loader.load(tmp_path / "absent.bpf.o")
    assert str(tmp_path / "absent.bpf.o") in str(info.value)


def test_not_elf(loader, tmp_path):
    path = tmp_path / "text.bpf.o"
    path.write_text("not an object\n")
    with pytest.raises(BpfLoadError, match="is not an ELF file"):
        loader.load(path)


def test_elf_but_not_bpf(loader):
    with pytest.raises(BpfLoadError, match="is an ELF file but not a BPF object"):
        loader.load(Path(sys.executable).resolve())


def test_verifier_rejection_carries_log(loader):
    with pytest.raises(BpfLoadError) as info:
        loader.load(bpf_object("bad_verifier"))
    err = info.value
    assert err.errno == errno.EACCES
    assert "invalid access to packet" in err.verifier_log
    assert "bad_access" in str(err)


def test_verifier_log_inside_another_libbpf_messages_block(loader):
    # The doctor collects libbpf's messages around each check, and a check that
    # loads or attaches collects them again inside: the inner block gets the log,
    # the outer one keeps collecting after it (this deadlocked with a plain Lock).
    import threading

    logs: dict[str, object] = {}

    def nested() -> None:
        with libbpf_messages() as outer:
            with pytest.raises(BpfLoadError) as info:
                loader.load(bpf_object("bad_verifier"))
            logs["inner"] = info.value.verifier_log
            logs["outer_during"] = list(outer)
            assert not lib.bpf_object__open_file(b"/etc/passwd", None)  # libbpf says why
            logs["outer_after"] = "".join(outer)

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "libbpf_messages deadlocked when nested"
    assert "invalid access to packet" in logs["inner"]
    assert logs["outer_during"] == []
    assert logs["outer_after"] == "libbpf: elf: '/etc/passwd' is not a proper ELF object\n"


def test_relative_path_uses_base_dir(tmp_path):
    require_root()
    path = bpf_object("xdp_helpers")
    with BpfLoader(base_dir=path.parent) as bpf:
        assert "xdp_cpu" in bpf.load(path.name).programs


def _prog_exists(prog_id: int) -> bool:
    fd = lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return False
    os.close(fd)
    return True


def test_loader_close_unloads_everything():
    require_root()
    bpf = BpfLoader()
    a = bpf.load(bpf_object("xdp_helpers"))
    b = bpf.load(bpf_object("xdp_helpers"))
    ids = [p.id for o in (a, b) for p in o.programs.values()]
    prog = a.programs["xdp_helpers"]
    assert all(_prog_exists(i) for i in ids)
    bpf.close()
    assert a.closed and b.closed
    assert not any(_prog_exists(i) for i in ids)
    with pytest.raises(ValueError, match="is closed"):
        prog.run(udp_packet())
    bpf.close()  # idempotent


def test_object_context_manager_and_finalizer():
    require_root()
    with BpfObject(bpf_object("xdp_helpers")) as obj:
        prog_id = obj.programs["xdp_cpu"].id
        assert _prog_exists(prog_id)
    assert not _prog_exists(prog_id)
    # Forgotten objects are closed by their weakref.finalize backstop.
    obj = BpfObject(bpf_object("xdp_helpers"))
    prog_id = obj.programs["xdp_cpu"].id
    del obj
    gc.collect()
    assert not _prog_exists(prog_id)


# -- Link.fd and Program.iterate: a task iterator runs on any host that loads BPF ------

ROOT = Path(__file__).resolve().parents[1]
#: Made by BPF links: not while tests/test_netns.py compares the machine's links.
links_group = pytest.mark.machine_state


def built_object(folder: str, name: str, path: str) -> Path:
    """ROOT/folder/path, built with `make -C folder` if missing (ci/setup builds it)."""
    obj = ROOT / folder / path
    if not obj.exists():
        if shutil.which("clang") is None or shutil.which("bpftool") is None:
            pytest.skip(f"{obj} is not built and clang/bpftool are missing (run bash ci/setup)")
        subprocess.run(["make", "-s", "-C", str(ROOT / folder)], check=True)
    return obj


@pytest.fixture
def iterator(loader):
    path = built_object("tests/conformance", "iter_task", "build/iter_task.bpf.o")
    return loader.load(path).programs["dump_task"]


def link_info(fd: int) -> bpf_link_info:
    info = bpf_link_info()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    check_int(lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "info")
    return info


def links_of(prog_id: int) -> list[dict]:
    """The machine's BPF links of program `prog_id` (bpftool)."""
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed")
    out = subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True)
    return [link for link in json.loads(out.stdout or "[]") if link.get("prog_id") == prog_id]


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


@links_group
def test_iterate_returns_what_the_iterator_wrote(iterator):
    assert iterator.section == "iter/task"
    out = iterator.iterate()
    pid = os.getpid()
    # tests/conformance/iter_task.bpf.c: a line and a record per task, then a trailer.
    assert out.startswith(b"    tgid      pid comm\n"), out[:100]
    assert b"%8d %8d " % (pid, pid) in out
    assert struct.pack("<4sII", b"TSK1", pid, pid) in out
    assert out.endswith(b"end of tasks\n") and out.count(b"TSK1") > 1, out[-100:]
    # Each call runs it anew, and leaves no attachment behind.
    assert b"%8d %8d " % (pid, pid) in iterator.iterate()
    assert links_of(iterator.id) == []


def test_iterate_refuses_a_program_that_is_not_an_iterator(obj):
    with pytest.raises(AttachError) as info:
        obj.programs["xdp_cpu"].iterate()
    text = str(info.value)
    assert "cannot iterate xdp_cpu" in text and "not an iterator" in text, text
    assert 'it is a xdp program from SEC("xdp")' in text and "\n" not in text, text


@links_group
def test_link_fd_is_the_kernel_link_of_the_attachment(iterator):
    with iterator.attach() as link:  # SEC("iter/task"): an iterator link
        info = link_info(link.fd)
        assert info.prog_id == iterator.id
        assert [entry["id"] for entry in links_of(iterator.id)] == [info.id]
        # What the fd is for: bpf_iter_create(link fd) runs the iterator once more.
        fd = check_int(lib.bpf_iter_create(link.fd), "bpf_iter_create")
        try:
            assert b"%8d " % os.getpid() in read_all(fd)
        finally:
            os.close(fd)
    assert links_of(iterator.id) == []
    with pytest.raises(ValueError, match="link of dump_task is closed"):
        _ = link.fd


def test_a_tc_link_has_no_fd_and_says_why():
    # A tc filter is a netlink object, not a BPF link: nothing to attach for this.
    link = TcLink("tc_classifier", "veth0", 7, None, "ingress", 1, 49152)
    assert not hasattr(link, "fd")
    with pytest.raises(NoLinkFd) as info:
        _ = link.fd
    text = str(info.value)
    assert isinstance(info.value, AttributeError) and "\n" not in text
    assert text.startswith("a tc filter has no link fd: tc_classifier on veth0 ingress"), text
    assert "handle 0x1 and priority 49152" in text, text


@links_group
def test_an_xdp_link_fd_is_its_bpf_link(loader):
    from pytest_lbr.bpf.netns import VethPair

    if shutil.which("ip") is None:
        pytest.skip("iproute2's ip is not installed")
    path = built_object("examples", "veth_xdp", "veth_xdp/build/veth_xdp.bpf.o")
    prog = loader.load(path).programs["veth_xdp"]
    with VethPair.create() as pair, prog.attach_xdp(pair.host.name, mode="generic") as link:
        info = link_info(link.fd)
        assert (info.id, info.prog_id) == (link.id, prog.id)


def test_the_bpf_package_re_exports_exactly_the_harness_names() -> None:
    # pytest_lbr.bpf names them lazily (its own list): the two lists must agree.
    import pytest_lbr.bpf
    from pytest_lbr.bpf import harness

    assert set(pytest_lbr.bpf.__all__) == {*harness.__all__, "VethPair"}
    for name in pytest_lbr.bpf.__all__:
        assert getattr(pytest_lbr.bpf, name) is not None
