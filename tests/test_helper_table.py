"""`pytest-lbr doctor --helpers`'s rows (`capture.helper_table`), on what the 6.12
guest's kernel has: which helpers the function tracer can patch, and how the graph
backend sees the others."""

from __future__ import annotations

from pytest_lbr.capture.helper_table import (
    AS_PARENT,
    IMPLIED,
    RECORDED,
    format_rows,
    helper_rows,
)

#: Measured in the 6.12 guest: available_filter_functions has these ...
TRACEABLE = {"bpf_get_current_pid_tgid", "copy_from_kernel_nofault", "bpf_bprintf_prepare"}
#: ... and these (kernel/trace/bpf_trace.c, built without -pg) are missing.
CALLEES = {
    "bpf_probe_read_kernel": ["copy_from_kernel_nofault"],
    "bpf_get_current_task": [],
    "bpf_trace_printk": ["bpf_bprintf_prepare"],
}
IDS = {6: "bpf_trace_printk", 14: "bpf_get_current_pid_tgid", 35: "bpf_get_current_task",
       113: "bpf_probe_read_kernel", 200: "bpf_not_in_this_kernel"}  # fmt: skip
IMPLEMENTS = {name: name for name in IDS.values() if name != "bpf_not_in_this_kernel"}


def test_each_helper_says_how_the_graph_backend_sees_it() -> None:
    rows = helper_rows(IDS, IMPLEMENTS, TRACEABLE.__contains__, CALLEES.get)
    seen = {r.helper: r.graph for r in rows}
    assert seen["bpf_get_current_pid_tgid"] == RECORDED
    assert seen["bpf_probe_read_kernel"] == AS_PARENT
    assert seen["bpf_trace_printk"] == AS_PARENT
    assert seen["bpf_get_current_task"] == IMPLIED
    assert seen["bpf_not_in_this_kernel"].endswith("unknown")
    assert [r.helper for r in rows] == list(IDS.values())  # id order
    table = format_rows(rows, markdown=True)
    assert table.splitlines()[0].startswith("| helper (C name) | implemented by |")
    assert "| `bpf_get_current_task` | `bpf_get_current_task` | no |" in table
