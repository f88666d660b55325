"""The table of libbpf macros that call helpers (`pytest_lbr.macros`) says what the
installed libbpf headers say, and `called()` takes the macro's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_lbr.macros import MACRO_HELPERS, helpers_of
from pytest_lbr.model import Branch, Hit, Location, Trace, TraceQueryError

HEADERS = Path("/usr/include/bpf")
_DEFINE = re.compile(r"^#define\s+(\w+)(?:\(|\s)(.*)$")
_WORD = re.compile(r"\b\w+\b")


def _defines() -> dict[str, str]:
    """Macro name -> its definition's text (continuation lines joined), from the
    headers a BPF program includes."""
    out: dict[str, str] = {}
    for name in ("bpf_helpers.h", "bpf_core_read.h"):
        text = (HEADERS / name).read_text().replace("\\\n", " ")
        for line in text.splitlines():
            m = _DEFINE.match(line.strip())
            if m:
                out.setdefault(m[1], m[2])
    return out


def _expands_to(macro: str, defines: dict[str, str]) -> set[str]:
    """Every identifier `macro`'s expansion can reach through other macros."""
    seen: set[str] = set()
    todo = [macro]
    while todo:
        for word in _WORD.findall(defines.get(todo.pop(), "")):
            if word not in seen:
                seen.add(word)
                todo.append(word)
    return seen


def _helpers() -> set[str]:
    """The helper names bpf_helper_defs.h declares."""
    text = (HEADERS / "bpf_helper_defs.h").read_text()
    return set(re.findall(r"\(\s*\*\s*(?:const\s+)?(bpf_\w+)\s*\)\(", text))


@pytest.mark.skipif(not (HEADERS / "bpf_helpers.h").exists(), reason="libbpf-dev not installed")
def test_every_macro_calls_the_helpers_the_table_names() -> None:
    defines, helpers = _defines(), _helpers()
    assert "bpf_trace_printk" in helpers
    for macro, called in MACRO_HELPERS.items():
        assert macro in defines, f"{macro}: not a macro of the installed libbpf headers"
        reached = _expands_to(macro, defines) & helpers
        assert set(called) <= helpers, f"{macro}: {called} are not all helpers"
        assert reached == set(called), f"{macro} expands to calls of {sorted(reached)}"


def test_called_takes_the_macro_the_source_wrote() -> None:
    prog = Location(0x1000, "handle_exec", 0x40)
    printk = Location(0x2000, "bpf_trace_vprintk", 0, helper="bpf_trace_vprintk")
    read = Location(0x3000, "bpf_probe_read_kernel", 0, helper="bpf_probe_read_kernel")
    hit = Hit("prog:name:handle_exec")
    hit.branches = [Branch(prog, printk, "call"), Branch(prog, read, "call")]
    trace = Trace(hits=[hit])
    assert trace.called("bpf_printk", by="handle_exec")
    assert trace.called("BPF_CORE_READ", by="handle_exec")
    assert trace.called("bpf_core_read")
    assert not trace.called("BPF_SEQ_PRINTF")
    with pytest.raises(TraceQueryError, match="by='other' names no program or function"):
        trace.called("bpf_printk", by="other")  # a caller the trace does not hold
    assert not trace.called("bpf_printk", by="bpf_probe_read_kernel")
    assert helpers_of("bpf_map_lookup_elem") == ()
