"""libbpf's macros that a BPF author writes where a helper is called.

`bpf_printk("x=%d", x)` is no helper: libbpf's bpf_helpers.h expands it into a
call of `bpf_trace_printk` (up to 3 arguments) or `bpf_trace_vprintk` (more);
`BPF_CORE_READ(task, real_parent, tgid)` (bpf_core_read.h) into calls of
`bpf_probe_read_kernel`. A test asserts what its C source wrote,
`trace.called("bpf_printk")`, so a query names either the helper or one of
these macros. The one table, checked against the installed headers
(/usr/include/bpf/bpf_helpers.h, bpf_core_read.h) by
tests/test_macros.py.
"""

from __future__ import annotations

__all__ = ["MACRO_HELPERS", "helpers_of"]

#: Macro -> the helpers (as bpf_helpers.h names them) its expansion calls.
MACRO_HELPERS: dict[str, tuple[str, ...]] = {
    # bpf_helpers.h: ___bpf_pick_printk picks __bpf_printk (bpf_trace_printk) for
    # up to 3 arguments, __bpf_vprintk (bpf_trace_vprintk) for more.
    "bpf_printk": ("bpf_trace_printk", "bpf_trace_vprintk"),
    "__bpf_printk": ("bpf_trace_printk",),
    "__bpf_vprintk": ("bpf_trace_vprintk",),
    "BPF_SEQ_PRINTF": ("bpf_seq_printf",),
    "BPF_SNPRINTF": ("bpf_snprintf",),
    # bpf_core_read.h: CO-RE relocated reads.
    "bpf_core_read": ("bpf_probe_read_kernel",),
    "bpf_core_read_str": ("bpf_probe_read_kernel_str",),
    "bpf_core_read_user": ("bpf_probe_read_user",),
    "bpf_core_read_user_str": ("bpf_probe_read_user_str",),
    "BPF_CORE_READ": ("bpf_probe_read_kernel",),
    "BPF_CORE_READ_INTO": ("bpf_probe_read_kernel",),
    "BPF_CORE_READ_STR_INTO": (
        "bpf_probe_read_kernel",
        "bpf_probe_read_kernel_str",
    ),  # pointers on the way, then the string
    "BPF_CORE_READ_USER": ("bpf_probe_read_user",),
    "BPF_CORE_READ_USER_INTO": ("bpf_probe_read_user",),
    "BPF_CORE_READ_USER_STR_INTO": (
        "bpf_probe_read_user",
        "bpf_probe_read_user_str",
    ),  # pointers on the way, then the string
    "BPF_CORE_READ_BITFIELD_PROBED": ("bpf_probe_read_kernel",),
    # bpf_core_read.h: the same reads without CO-RE relocations.
    "BPF_PROBE_READ": ("bpf_probe_read",),
    "BPF_PROBE_READ_INTO": ("bpf_probe_read",),
    "BPF_PROBE_READ_STR_INTO": (
        "bpf_probe_read",
        "bpf_probe_read_str",
    ),  # pointers on the way, then the string
    "BPF_PROBE_READ_USER": ("bpf_probe_read_user",),
    "BPF_PROBE_READ_USER_INTO": ("bpf_probe_read_user",),
    "BPF_PROBE_READ_USER_STR_INTO": (
        "bpf_probe_read_user",
        "bpf_probe_read_user_str",
    ),  # pointers on the way, then the string
}


def helpers_of(name: str) -> tuple[str, ...]:
    """The helpers a macro called `name` expands into calls of; () for any other name."""
    return MACRO_HELPERS.get(name, ())
