"""Kernel symbols from /proc/kallsyms and from kallsyms-format files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lbr.symbols import get_symbolizer
from pytest_lbr.symbols.kallsyms import KernelSymbols, Symbol

SAMPLE = """\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81200000 T vfs_write
ffffffff81200400 t write_null
ffffffff81300000 D some_data
ffffffffa0001000 t bpf_prog_0123456789abcdef_xdp_count\t[bpf]
ffffffffc0100000 t e1000_probe\t[e1000]
"""


def test_lookup_names_offsets_modules(tmp_path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text(SAMPLE)
    ks = KernelSymbols(str(path))
    s = ks.lookup(0xFFFFFFFF81200010)
    assert (s.name, s.offset, s.module) == ("vfs_write", 0x10, None)
    assert ks.lookup(0xFFFFFFFF81000004).name == "_stext"  # aliases: first one wins
    s = ks.lookup(0xFFFFFFFFA0001008)
    assert (s.name, s.module) == ("bpf_prog_0123456789abcdef_xdp_count", "bpf")
    assert ks.lookup(0xFFFFFFFFC0100001).module == "e1000"
    assert ks.lookup(0x1000) is None
    assert ks.address_of("some_data") is None  # data never holds code
    assert ks.in_core(0xFFFFFFFF81200401) and not ks.in_core(0xFFFFFFFFA0001008)


def test_live_bpf_code_wins_over_a_module_alias_at_its_address(tmp_path) -> None:
    """6.1 allocates BPF images where modules live; kallsyms listed a module's freed
    init function at a live trampoline's address, module symbols first."""
    path = tmp_path / "kallsyms"
    path.write_text(
        SAMPLE
        + "ffffffffc0200000 t veth_init\t[veth]\n"
        + "ffffffffc0200000 t bpf_trampoline_6442450944\t[bpf]\n"
    )
    s = KernelSymbols(str(path)).lookup(0xFFFFFFFFC0200001)
    assert (s.name, s.offset, s.module) == ("bpf_trampoline_6442450944", 1, "bpf")


def test_reload_sees_new_symbols(tmp_path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text(SAMPLE)
    ks = KernelSymbols(str(path))
    path.write_text(SAMPLE + "ffffffffc0002000 t bpf_prog_fedcba9876543210_new\t[bpf]\n")
    assert ks.lookup(0xFFFFFFFFC0002004).name.endswith("_xdp_count")
    ks.reload()
    assert ks.lookup(0xFFFFFFFFC0002004).name == "bpf_prog_fedcba9876543210_new"


def test_live_kallsyms_locates_kernel_functions() -> None:
    ks = KernelSymbols()
    if not ks.readable:
        pytest.skip("/proc/kallsyms hides addresses here (needs root / kptr_restrict=0)")
    addr = ks.address_of("vfs_write")
    assert addr is not None
    loc = get_symbolizer().locate(addr + 5)
    assert (loc.symbol, loc.offset, loc.module) == ("vfs_write", 5, None)
    assert str(loc).startswith("vfs_write+0x5")


def test_each_vmlinux_path_has_its_own_symbolizer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest_lbr.symbols as symbols

    path = str(tmp_path / "vmlinux-x")
    assert symbols.get_symbolizer(path) is symbols.get_symbolizer(path)
    # The session passes --lbr-vmlinux along; nothing sets a process-wide default.
    assert symbols.get_symbolizer() is not symbols.get_symbolizer(path)
    assert symbols.get_symbolizer() is symbols.get_symbolizer(None)
    assert not hasattr(symbols, "use_vmlinux")


def test_arm64_layout_programs_and_modules_are_below_the_kernel() -> None:
    # An excerpt of the arm64 6.1 guest's /proc/kallsyms with tc_classifier loaded
    # and veth in: BPF JIT images and modules live below the kernel image there, so
    # "in the core" cannot start at the lowest symbol (that took every program for
    # core code, and a stale program name was never re-read).
    from pathlib import Path

    ks = KernelSymbols(str(Path(__file__).parents[1] / "data" / "kallsyms-6.1-arm64-excerpt.txt"))
    prog = ks.address_of("bpf_prog_4f06f2f2c3088c9a_tc_classifier")
    veth = ks.address_of("veth_get_sset_count")
    vfs_write = ks.address_of("vfs_write")
    assert prog is not None and veth is not None and vfs_write is not None
    assert prog < veth < vfs_write
    assert ks.in_core(vfs_write + 0x10) and ks.in_core(ks.address_of("_stext") or 0)
    assert not ks.in_core(prog + 0x6C) and not ks.in_core(veth + 4)
    s = ks.lookup(prog + 0x6C)
    assert (s.name, s.offset, s.module) == ("bpf_prog_4f06f2f2c3088c9a_tc_classifier", 0x6C, "bpf")
    assert ks.lookup(veth + 4).module == "veth"


def _table(ks: KernelSymbols) -> tuple[object, ...]:
    return tuple(ks._table)


# Two reads of the live file: a program another xdist worker loads between them
# changes it (seen once on the host). ci/test runs `machine_state` tests alone.
@pytest.mark.machine_state
def test_live_kallsyms_reads_the_same_as_columns_and_as_lines() -> None:
    """/proc/kallsyms is read as columns (the kernel's own format); line by line gives
    the same table."""
    fast = KernelSymbols()
    if not fast.readable:
        pytest.skip("/proc/kallsyms hides addresses here (needs root / kptr_restrict=0)")
    assert fast.columns
    assert _table(fast) == _table(KernelSymbols(columns=False))


# What s_show() in kernel/kallsyms.c prints: "%px %c %s\n" for the core kernel, sorted
# by address, then "%px %c %s\t[%s]\n" for modules and BPF programs.
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.0123456789", min_size=1, max_size=12)
_kind = st.sampled_from("tTwWdDbBrRA")


@st.composite
def _kallsyms_text(draw: st.DrawFn) -> str:
    core = sorted(draw(st.lists(st.integers(0, (1 << 64) - 1), max_size=40)))
    hidden = draw(st.booleans())
    lines = [
        f"{0 if hidden else a:016x} {draw(_kind)} {draw(_name)}\n"
        for a in core
        for _ in range(draw(st.integers(1, 2)))  # aliases: several names at one address
    ]
    for _ in range(draw(st.integers(0, 8))):
        addr = draw(st.integers(0, (1 << 64) - 1))
        module = draw(st.sampled_from(["bpf", "ext4", "__builtin__ftrace"]))
        lines.append(f"{addr:016x} {draw(_kind)} {draw(_name)}\t[{module}]\n")
    return "".join(lines)


@settings(max_examples=300, deadline=None)
@given(_kallsyms_text())
def test_kernel_formatted_text_reads_the_same_as_columns_and_as_lines(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kallsyms")
        with open(path, "w") as f:
            f.write(text)
        columns = KernelSymbols(path, columns=True)
        assert _table(columns) == _table(KernelSymbols(path, columns=False))


def test_the_helpers_protos_come_from_the_same_read_as_the_code_symbols() -> None:
    """The live table keeps the `*_proto` data symbols the helper names need (one read
    a session, not two): exactly what reading /proc/kallsyms line by line for them
    gives, and what the helper names are read from."""
    ks = KernelSymbols()
    if not ks.readable:
        pytest.skip("/proc/kallsyms hides addresses here (needs root / kptr_restrict=0)")
    with open("/proc/kallsyms") as f:
        alone = [
            (w[2], int(w[0], 16))
            for w in map(str.split, f)
            if len(w) == 3 and w[1] in "dDrR" and "_proto" in w[2] and int(w[0], 16)
        ]
    # (This host's kernel lists few data symbols; the guests' list every proto:
    # tests/kernel/test_helper_facts.py names helpers through this table there.)
    assert ks.protos == alone


def test_a_file_read_line_by_line_has_no_protos(tmp_path) -> None:
    path = tmp_path / "kallsyms"
    core, tagged = SAMPLE.split("ffffffffa0001000", 1)
    proto = "ffffffff81300100 R bpf_map_lookup_elem_proto\n"
    path.write_text(core + proto + "ffffffffa0001000" + tagged)
    ks = KernelSymbols(str(path))
    assert ks.protos is None  # not /proc/kallsyms: read line by line, no data kept
    columns = KernelSymbols(str(path), columns=True)
    assert columns.protos == [("bpf_map_lookup_elem_proto", 0xFFFFFFFF81300100)]


def test_the_running_kernels_table_is_one_per_process(tmp_path: Path) -> None:
    """The symbolizer, call-site searches and call graphs share one table, so a
    reload for one of them serves them all."""
    from pytest_lbr.capture.call_sites import call_sites
    from pytest_lbr.symbols import Symbolizer
    from pytest_lbr.symbols.kallsyms import live_kallsyms

    try:
        table = live_kallsyms()
    except OSError as e:
        pytest.skip(f"/proc/kallsyms unreadable here: {e}")
    assert Symbolizer().kallsyms is table
    if table.readable:
        assert call_sites.kallsyms() is table
    # A table of another file (a saved kallsyms) is that file's own.
    saved = tmp_path / "kallsyms"
    saved.write_text("ffffffff81000000 T _stext\nffffffff81000100 T start_kernel\n")
    other = Symbolizer(kallsyms=str(saved)).kallsyms
    assert other is not table
    assert other.address_of("start_kernel") == 0xFFFFFFFF81000100


def test_a_reload_reads_only_what_follows_the_core_kernel_again(tmp_path: Path) -> None:
    """The core kernel's lines do not change while it runs, and modules' rarely: a
    reload reuses them (the same objects) and reads the programs' lines; a changed
    core (another file) is read again."""
    path = tmp_path / "kallsyms"
    core = "ffffffff81000000 T _stext\nffffffff81000100 t local_fn\nffffffff81000200 D x_proto\n"
    module = "ffffffffbf000000 t veth_open\t[veth]\n"
    path.write_text(core + module + "ffffffffc0000000 t bpf_prog_1_a\t[bpf]\n")
    ks = KernelSymbols(str(path), columns=True)
    first, modules = ks._core, ks._modules
    assert first is not None and ks.protos == [("x_proto", 0xFFFFFFFF81000200)]
    path.write_text(core + module + "ffffffffc0000000 t bpf_prog_2_b\t[bpf]\n")
    ks.reload()
    assert ks._core is first and ks._modules is modules
    assert ks.lookup(0xFFFFFFFFBF000001) == Symbol("veth_open", 1, "veth")
    assert ks.lookup(0xFFFFFFFFC0000004) == Symbol("bpf_prog_2_b", 4, "bpf")
    assert ks.address_of("bpf_prog_1_a") is None and ks.is_local(0xFFFFFFFF81000100)
    path.write_text(core.replace("local_fn", "renamed_fn"))
    ks.reload()
    assert ks._core is not first
    assert ks.lookup(0xFFFFFFFF81000104) == Symbol("renamed_fn", 4, None)
    assert ks.lookup(0xFFFFFFFFC0000004) == Symbol(
        "renamed_fn", 0xFFFFFFFFC0000004 - 0xFFFFFFFF81000100, None
    )
