"""x86's preempt_count addresses for the LBR tracer's config, from kallsyms text
(the kernel tests check in_interrupt itself: test_scope's XDP-in-softirq test)."""

from __future__ import annotations

from pathlib import Path

from pytest_lbr.kernel.percpu import preempt_count_symbols

# The shape of /proc/kallsyms as Debian's 6.12 kernel prints it (per-CPU variables are
# offsets into each CPU's per-CPU area), with a module symbol of the same name and a
# hidden (zeroed) address, both of which must be ignored.
KALLSYMS_612 = """\
0000000000000000 D fixed_percpu_data
0000000000032000 D pcpu_hot
ffffffff82e26e20 T _stext
ffffffff8460a8a0 D __per_cpu_offset
ffffffffc0a01000 t pcpu_hot\t[some_module]
0000000000000000 D __preempt_count
"""


def test_finds_the_names_the_kernel_lists(tmp_path: Path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS_612)
    assert preempt_count_symbols(str(path)) == {
        "pcpu_hot": 0x32000,
        "__per_cpu_offset": 0xFFFFFFFF8460A8A0,
    }


def test_an_unreadable_kallsyms_gives_nothing(tmp_path: Path) -> None:
    assert preempt_count_symbols(str(tmp_path / "missing")) == {}


def test_only_whole_names_of_core_kernel_lines_count(tmp_path: Path) -> None:
    """A longer name ending in one of ours, a module's symbol and a line that is not
    `ADDRESS TYPE NAME` are skipped; a name's first line decides, even when hidden."""
    path = tmp_path / "kallsyms"
    path.write_text(
        "ffffffff81000000 T my__per_cpu_offset\n"
        "ffffffffc0a01000 d __per_cpu_offset\t[mod]\n"
        "not an address __per_cpu_offset\n"
        "ffffffff8460a8a0 D __per_cpu_offset\n"
        "0000000000000000 D pcpu_hot\n"
        "0000000000032000 D pcpu_hot\n"
        "ffffffff8460a8b0 D __preempt_count"  # no newline at the end of the file
    )
    assert preempt_count_symbols(str(path)) == {
        "__per_cpu_offset": 0xFFFFFFFF8460A8A0,
        "__preempt_count": 0xFFFFFFFF8460A8B0,
    }
