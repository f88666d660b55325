"""Kernel file:line on Debian's 6.1 debug vmlinux: pyelftools vs llvm-symbolizer, build-id checks."""

from __future__ import annotations

import glob
import os
import shutil
import sys

import pytest

from pytest_lbr.cli.fetch_vmlinux import fetch_debian_dbg
from pytest_lbr.symbols.dwarf import Frame
from pytest_lbr.symbols.vmlinux import (
    VmlinuxError,
    VmlinuxLines,
    VmlinuxMismatch,
    check_matches_running,
    elf_build_id,
    running_build_id,
    sample_text_addresses,
)


def _release_61() -> str:
    images = sorted(glob.glob("/boot/vmlinuz-6.1.0-*-amd64"))
    if not images:
        pytest.skip("no Debian 6.1 kernel image in /boot (bash ci/setup installs it)")
    return os.path.basename(images[-1]).removeprefix("vmlinuz-")


@pytest.fixture(scope="session")
def vmlinux_61() -> str:
    """Debian's 6.1 debug vmlinux matching the installed 6.1 image, fetched once."""
    release = _release_61()
    try:
        return fetch_debian_dbg(release)
    except (VmlinuxError, OSError) as exc:
        pytest.skip(f"cannot fetch linux-image-{release}-dbg with apt: {exc}")


def _llvm() -> str:
    for name in ("llvm-symbolizer", "llvm-symbolizer-14"):
        if shutil.which(name):
            return name
    pytest.skip("llvm-symbolizer is not installed (Debian package llvm)")


@pytest.mark.slow
def test_pyelftools_agrees_with_llvm_symbolizer(vmlinux_61: str, tmp_path) -> None:
    _llvm()
    llvm = VmlinuxLines(vmlinux_61, cache=False)
    # 1,000 addresses in 25 random functions: every kind of code (inlines, .cold
    # parts, clones) while keeping pyelftools' per-unit decoding to seconds.
    addrs = sample_text_addresses(llvm, 1000, seed=61, functions=25)
    want = llvm.lookup(addrs)
    py = VmlinuxLines(vmlinux_61, use_llvm=False, cache=False)
    got = py.lookup(addrs)
    inlined = sum(1 for a in addrs if len(want[a]) > 1)
    agree = sum(1 for a in addrs if got[a] == want[a])
    bad = [(hex(a), got[a], want[a]) for a in addrs if got[a] != want[a]][:5]
    assert agree >= 0.99 * len(addrs), f"{agree}/{len(addrs)} agree; first differences: {bad}"
    assert all(want[a] for a in addrs), "llvm-symbolizer found no line for some sampled address"
    assert inlined > 0, "sample holds no inlined frame: the test would not cover inlines"
    for frames in got.values():
        assert not frames[0].file.startswith(("/", "debian/")), frames


def test_cache_makes_second_session_warm(vmlinux_61: str, tmp_path) -> None:
    first = VmlinuxLines(vmlinux_61, cache_directory=tmp_path)
    addrs = sample_text_addresses(first, 200, seed=7, functions=5)
    cold = first.lookup(addrs)
    # A new object (a new session) with no way to decode: answers come from disk.
    second = VmlinuxLines(vmlinux_61, use_llvm=False, cache_directory=tmp_path)
    second._dwarf_lookup = None  # type: ignore[method-assign,assignment]
    assert second.lookup(addrs) == cold
    assert any(p.name.endswith(".bin") for p in (tmp_path / "lines").iterdir())


def test_sessions_mixing_cached_and_new_addresses(vmlinux_61: str, tmp_path) -> None:
    """A later session asks for cached and new addresses, then a few of them: each
    answer is what an uncached lookup gives."""
    plain = VmlinuxLines(vmlinux_61, cache=False)
    first = sample_text_addresses(plain, 150, seed=11, functions=5)
    more = sample_text_addresses(plain, 150, seed=12, functions=5)
    truth = plain.lookup(first + more)
    VmlinuxLines(vmlinux_61, cache_directory=tmp_path).lookup(first)
    second = VmlinuxLines(vmlinux_61, cache_directory=tmp_path)
    assert second.lookup(first + more) == truth
    assert second.lookup(more[:3]) == {a: truth[a] for a in more[:3]}
    third = VmlinuxLines(vmlinux_61, cache_directory=tmp_path)
    third._llvm_lookup = third._dwarf_lookup = None  # type: ignore[method-assign,assignment]
    few = first[:5] + more[-5:]
    assert third.lookup(few) == {a: truth[a] for a in few}


def test_saves_are_spaced_and_nothing_is_lost(vmlinux_61: str, tmp_path, monkeypatch) -> None:
    """The first lookup saves at once; later ones within SAVE_INTERVAL wait for
    flush(), close() or the object's end, and none of them drops a result."""
    import gc

    from pytest_lbr.symbols import vmlinux as vm_mod
    from pytest_lbr.symbols.cache import FrameCache

    monkeypatch.setattr(vm_mod, "SAVE_INTERVAL", 3600.0)
    plain = VmlinuxLines(vmlinux_61, cache=False)
    a, b, c, d = (sample_text_addresses(plain, 20, seed=s, functions=2) for s in (21, 22, 23, 24))
    lines = VmlinuxLines(vmlinux_61, cache_directory=tmp_path)
    disk = FrameCache(lines.build_id, tmp_path)

    lines.lookup(a)
    assert set(a) <= disk.load().keys()
    lines.lookup(b)
    assert not set(b) & disk.load().keys()  # waiting
    lines.flush()
    assert set(b) <= disk.load().keys()
    lines.lookup(c)
    lines.close()
    assert set(c) <= disk.load().keys()
    lines.lookup(d)
    del lines
    gc.collect()
    assert set(d) <= disk.load().keys()
    assert disk.load() == plain.lookup(a + b + c + d)


def test_wrong_build_id_is_refused_naming_both(vmlinux_61: str) -> None:
    running = running_build_id()
    if running is None:
        pytest.skip("/sys/kernel/notes is unreadable here")
    theirs = VmlinuxLines(vmlinux_61, cache=False).build_id
    if running == theirs:
        pytest.skip("running the 6.1 kernel itself: no mismatch to test")
    with pytest.raises(VmlinuxMismatch) as exc:
        check_matches_running(vmlinux_61)
    msg = str(exc.value)
    assert running in msg and theirs in msg and "\n" not in msg


def test_truncated_and_non_elf_files_give_one_line(vmlinux_61: str, tmp_path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"this is not an ELF file\n" * 10)
    cut = tmp_path / "cut"
    with open(vmlinux_61, "rb") as f:
        cut.write_bytes(f.read(4 << 20))
    for path in (junk, cut, tmp_path / "missing"):
        with pytest.raises(VmlinuxError) as exc:
            VmlinuxLines(str(path))
        assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(VmlinuxError, match="truncated"):
        VmlinuxLines(str(cut))


def test_offline_symbol_address_and_functions(vmlinux_61: str) -> None:
    vm = VmlinuxLines(vmlinux_61, cache=False)
    stext = vm.symbol_address("_stext")
    assert stext is not None and stext % 4096 == 0
    start = vm.symbol_address("vfs_write")
    assert vm.function_at(start + 3) == ("vfs_write", 3)
    (frames,) = vm.lookup([start]).values()
    assert frames[-1].function == "vfs_write" and frames[0].file == "fs/read_write.c"


def test_unwritable_cache_directory_is_not_an_error(tmp_path) -> None:
    from pytest_lbr.symbols.cache import FrameCache
    from pytest_lbr.symbols.dwarf import Frame

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    cache = FrameCache("00ff", ro / "sub")
    if os.access(ro, os.W_OK):  # root ignores modes: use a path under a file instead
        cache = FrameCache("00ff", tmp_path / "file-not-dir")
        (tmp_path / "file-not-dir").write_text("")
    cache.save({1: (Frame("f", "a.c", 3),)})
    assert cache.load() == {}
    good = FrameCache("00ff", tmp_path / "ok")
    good.save({1: (Frame("f", "a.c", 3),), 2: ()})
    assert good.load() == {1: (Frame("f", "a.c", 3),), 2: ()}


def test_concurrent_sessions_keep_each_others_additions(tmp_path) -> None:
    """Two workers that loaded the cache before either saved: both additions stay."""
    import multiprocessing

    from pytest_lbr.symbols.cache import FrameCache

    FrameCache("00ff", tmp_path).save({1: (Frame("base", "a.c", 1),)})
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_entries, args=(tmp_path, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = FrameCache("00ff", tmp_path).load()
    assert len(got) == 1 + 4 * 200
    assert got[1] == (Frame("base", "a.c", 1),)
    assert got[10_000 + 1000 * 3 + 199] == (Frame("w3", "w.c", 199),)


def _add_entries(directory, worker: int) -> None:
    from pytest_lbr.symbols.cache import FrameCache

    cache = FrameCache("00ff", directory)
    for i in range(200):  # one save per address: many interleaved writers
        cache.save({10_000 + 1000 * worker + i: (Frame(f"w{worker}", "w.c", i),)})


def _pyelftools_build_id(path: str) -> str | None:
    from pytest_lbr.symbols.vmlinux import _elf_build_id, _open_elf

    f, elf = _open_elf(path)
    try:
        return _elf_build_id(elf)
    finally:
        f.close()


def test_build_id_read_from_the_section_headers_is_pyelftools_one(
    vmlinux_61: str, tmp_path
) -> None:
    """`elf_build_id` reads the headers itself (every session asks it of a debug
    vmlinux); it gives what pyelftools gives, for files with and without a build-id,
    and leaves a file it cannot read whole to pyelftools' one-line error."""
    files = [vmlinux_61, sys.executable, *glob.glob("/lib/modules/*/build/vmlinux")]
    for path in files:
        assert elf_build_id(path) == _pyelftools_build_id(path), path
    assert elf_build_id(vmlinux_61) == VmlinuxLines(vmlinux_61, cache=False).build_id
    cut = tmp_path / "cut"
    with open(vmlinux_61, "rb") as f:
        cut.write_bytes(f.read(4 << 20))
    with pytest.raises(VmlinuxError) as ours:
        elf_build_id(str(cut))
    with pytest.raises(VmlinuxError) as theirs:
        _pyelftools_build_id(str(cut))
    assert str(ours.value) == str(theirs.value)
    assert str(cut) in str(ours.value) and "\n" not in str(ours.value)
