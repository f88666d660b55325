"""BPF program targets resolved against programs the harness loaded on this kernel."""

from __future__ import annotations

import os
import subprocess

import pytest

from pytest_lbr.bpf import BpfLoader
from pytest_lbr.bpf.libbpf import lib
from pytest_lbr.programs.find import ProgramRef, list_programs, resolve_program
from pytest_lbr.targets import TargetError, parse_target
from tests.bpf.objects import bpf_object, require_root

# Far above any id idr_alloc_cyclic() hands out on a test machine.
UNUSED_ID = 0x7FFFFFF0
LONG_NAME = "xdp_pass_with_a_long_name"
# Names and tags are looked up among every program loaded on the machine: another xdist
# worker loading tests/bpf/xdp_helpers at the same moment makes them ambiguous (a CI run
# failed so). ci/test runs `machine_state` tests with nothing beside them.
machine_wide = pytest.mark.machine_state


@pytest.fixture
def bpf():
    require_root()
    with BpfLoader() as loader:
        yield loader


@pytest.fixture
def obj(bpf):
    return bpf.load(bpf_object("xdp_helpers"))


def kallsyms() -> set[str]:
    with open("/proc/kallsyms") as f:
        return {line.split()[2] for line in f if "[bpf]" in line}


def prog_exists(prog_id: int) -> bool:
    fd = lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize(
    "form",
    [
        "object",
        "int",
        "id",
        pytest.param("name", marks=machine_wide),
        pytest.param("tag", marks=machine_wide),
    ],
)
def test_every_form_resolves_to_the_loaded_program(obj, form):
    prog = obj.programs["xdp_helpers"]
    target = {
        "object": prog,
        "int": prog.id,
        "id": f"prog:{prog.id}",
        "name": "prog:name:xdp_helpers",
        "tag": f"prog:tag:{prog.tag.upper()}",
    }[form]
    with resolve_program(parse_target(target)) as ref:
        assert isinstance(ref, ProgramRef)
        assert (ref.id, ref.name, ref.tag, ref.type) == (prog.id, "xdp_helpers", prog.tag, "xdp")
        assert ref.fd >= 0 and ref.fd != prog.fd  # its own reference
        assert ref.functions == ("xdp_helpers", "note_cpu")
    assert ref.fd == -1
    assert prog.run(b"\0" * 64).retval == 2  # the object's fd is untouched


def test_ksyms_are_the_kernels(obj):
    with resolve_program(obj.programs["xdp_helpers"]) as ref:
        assert ref.ksym == f"bpf_prog_{ref.tag}_xdp_helpers"
        assert len(ref.ksyms) == 2 and ref.ksyms[0] == ref.ksym
        assert ref.ksyms[1].startswith("bpf_prog_") and ref.ksyms[1].endswith("_note_cpu")
        assert set(ref.ksyms) <= kallsyms()


@machine_wide
def test_long_name_matches_btf_and_kernel_names(obj):
    prog = obj.programs[LONG_NAME]
    with resolve_program(f"prog:name:{LONG_NAME}") as ref:
        assert ref.id == prog.id
        assert ref.name == LONG_NAME[:15]  # what the kernel keeps
        assert ref.display_name == LONG_NAME
        assert ref.ksym == f"bpf_prog_{prog.tag}_{LONG_NAME}"
        assert ref.ksym in kallsyms()
    with resolve_program(f"prog:name:{LONG_NAME[:15]}") as ref:
        assert ref.id == prog.id


def test_ref_keeps_program_loaded(bpf):
    obj = bpf.load(bpf_object("xdp_helpers"))
    ref = resolve_program(obj.programs["xdp_cpu"])
    obj.close()
    assert prog_exists(ref.id)
    ref.close()
    ref.close()  # idempotent
    assert not prog_exists(ref.id)


@machine_wide
def test_ambiguous_name_and_tag_list_ids(bpf):
    a = bpf.load(bpf_object("xdp_helpers")).programs["xdp_cpu"]
    b = bpf.load(bpf_object("xdp_helpers")).programs["xdp_cpu"]
    ids = sorted([a.id, b.id])
    with pytest.raises(TargetError, match=rf"2 loaded BPF programs .*\(ids {ids[0]}, {ids[1]}\)"):
        resolve_program("prog:name:xdp_cpu")
    with pytest.raises(TargetError, match=r"have this tag .*pass one as 'prog:ID'"):
        resolve_program(f"prog:tag:{a.tag}")


def test_unknown_name_tag_id(obj):
    with pytest.raises(TargetError, match="no loaded BPF program has this name; loaded: .*xdp_cpu"):
        resolve_program("prog:name:no_such_prog")
    with pytest.raises(TargetError, match="no loaded BPF program has this tag"):
        resolve_program("prog:tag:00000000000000ff")
    with pytest.raises(TargetError, match=f"no BPF program with id {UNUSED_ID} is loaded"):
        resolve_program(UNUSED_ID)


def test_fd_that_is_not_a_program(obj, tmp_path):
    class FakeProgram:
        def __init__(self, fd: int) -> None:
            self.fd = fd

    with open(tmp_path / "f", "w") as f:
        with pytest.raises(TargetError, match=f"fd {f.fileno()} is not a BPF program"):
            resolve_program(FakeProgram(f.fileno()))
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(TargetError, match=f"fd {r} is not open"):
        resolve_program(FakeProgram(r))
    # Any object with a program .fd works (that is how bcc functions are accepted).
    with resolve_program(FakeProgram(obj.programs["xdp_cpu"].fd)) as ref:
        assert ref.name == "xdp_cpu"


def test_not_a_program_target():
    with pytest.raises(TargetError, match="not a BPF program target"):
        resolve_program("kfunc:vfs_write")


@pytest.fixture
def bpffs(tmp_path):
    """A private bpffs instance on a temporary directory."""
    require_root()
    mnt = tmp_path / "bpffs"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "bpf", "bpf", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount bpffs for pin tests: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_pinned_program_and_pinned_map(obj, bpffs):
    prog = obj.programs["xdp_helpers"]
    assert lib.bpf_obj_pin(prog.fd, str(bpffs / "prog").encode()) == 0
    assert lib.bpf_obj_pin(obj.maps["counts"].fd, str(bpffs / "map").encode()) == 0
    with resolve_program(f"prog:pinned:{bpffs}/prog") as ref:
        assert (ref.id, ref.tag) == (prog.id, prog.tag)
    with pytest.raises(TargetError, match="is pinned but is not a BPF program"):
        resolve_program(f"prog:pinned:{bpffs}/map")
    with pytest.raises(TargetError, match="nothing is pinned at"):
        resolve_program(f"prog:pinned:{bpffs}/absent")
    (bpffs / "prog").unlink()
    (bpffs / "map").unlink()


def test_list_programs_includes_loaded(obj):
    by_id = {p.id: p for p in list_programs()}
    for prog in obj.programs.values():
        info = by_id[prog.id]
        assert (info.tag, info.type) == (prog.tag, "xdp")
        assert info.display_name == prog.name
    ids = list(by_id)
    assert ids == sorted(ids)
