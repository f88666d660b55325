"""Where x86 keeps each CPU's preempt_count, from /proc/kallsyms, read once per process.

The LBR tracer tells interrupt context from task context by reading
preempt_count (bpf/lbr_tracer.bpf.c, `preempt_count()`). On x86 that is a
per-CPU variable whose name moved between kernels (`__preempt_count` in 6.1,
`pcpu_hot.preempt_count` from v6.2), found through `__per_cpu_offset`. The
tracer takes the addresses in its config (the hook set adds the member's offset
in `struct pcpu_hot`, from `kernel_btf`): as typeless `__ksym` externs, libbpf
read all of /proc/kallsyms again at every hook load. Reading it here costs that
once per process.
"""

from __future__ import annotations

import functools
import re

__all__ = ["PREEMPT_COUNT_SYMBOLS", "preempt_count_symbols"]

#: The kallsyms names the tracer's config is made of (struct lbr_config, sym_*).
PREEMPT_COUNT_SYMBOLS = ("__preempt_count", "pcpu_hot", "__per_cpu_offset")

#: What comes before a name on a kallsyms line: `ADDRESS TYPE`.
_HEAD = re.compile(rb"[0-9a-fA-F]+ [A-Za-z]")


@functools.cache
def preempt_count_symbols(path: str = "/proc/kallsyms") -> dict[str, int]:
    """Name -> address of those of `PREEMPT_COUNT_SYMBOLS` the kernel lists.

    Missing names (a kernel without CONFIG_KALLSYMS_ALL lists no variables, or
    kallsyms hides addresses without root) are left out: the tracer then reads
    no preempt_count and counts every hit as task context. The first address
    of a name wins, as libbpf's resolution did.
    """
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return {}
    if not text.endswith(b"\n"):
        text += b"\n"
    found: dict[str, int] = {}
    for name in PREEMPT_COUNT_SYMBOLS:
        # bytes.find, not a regex over the whole file (~10 MB; find is a memchr scan):
        # " NAME\n" ends a core kernel line (a module's lines end in "\t[module]").
        key, at = b" " + name.encode() + b"\n", 0
        while (end := text.find(key, at)) >= 0:
            at = end + 1
            head = text[text.rfind(b"\n", 0, end) + 1 : end]
            if _HEAD.fullmatch(head):
                addr = int(head.split(b" ")[0], 16)
                if addr:  # hidden (zeroed) addresses are useless
                    found[name] = addr
                break
    return found
