"""Which kernel functions a target names: the kernel BTF and ftrace's list of traceable functions.

A glob expands against `available_filter_functions` (what kprobes and ftrace can
hook) where tracefs is readable, else against the BTF's function names; the
tracer's own functions (pytest_lbr.noise) are never included.
"""

from __future__ import annotations

import ctypes
import fnmatch
import re
from collections import Counter
from collections.abc import Iterable
from ctypes import POINTER, c_uint32
from pathlib import Path

from pytest_lbr.bpf.libbpf import lib
from pytest_lbr.kernel.tracefs import TRACEFS_MOUNTS
from pytest_lbr.noise import TRACER_OWN_FUNCTIONS
from pytest_lbr.targets import Target

__all__ = [
    "btf_functions",
    "btf_problem",
    "expand_glob",
    "filter_functions_text",
    "matching_functions",
]

_BTF_KIND_FUNC = 12


def btf_problem(target: Target) -> str:
    """Why fexit cannot hook `target.function`: no kernel BTF, or the function is not
    in it ("" when it is)."""
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return f"{target.spec}: no kernel BTF (/sys/kernel/btf/vmlinux): fexit impossible"
    try:
        if lib.btf__find_by_name_kind(btf, (target.function or "").encode(), _BTF_KIND_FUNC) < 0:
            return (
                f"{target.spec}: {target.function} is not a function in the kernel BTF "
                "(misspelt, inlined, static duplicate or a module function)"
            )
        return ""
    finally:
        lib.btf__free(btf)


def _filter_functions_text() -> str | None:
    for root in TRACEFS_MOUNTS:
        try:
            return filter_functions_text(root)
        except OSError:
            continue
    return None


def btf_functions() -> list[str]:
    """Every function name in the kernel BTF (empty without BTF)."""
    btf = lib.btf__load_vmlinux_btf()
    if not btf or lib.libbpf_get_error(btf):
        return []
    try:
        out = []
        for type_id in range(1, lib.btf__type_cnt(btf)):
            t = ctypes.cast(lib.btf__type_by_id(btf, type_id), POINTER(c_uint32))
            if (t[1] >> 24) & 0x1F == _BTF_KIND_FUNC:
                out.append(lib.btf__str_by_offset(btf, t[0]).decode())
        return out
    finally:
        lib.btf__free(btf)


def expand_glob(pattern: str, functions: Iterable[str] | None = None) -> list[str]:
    """Traceable kernel functions matching `pattern`, minus the tracer's own, sorted, unique.

    Functions listed twice (static functions of the same name) are dropped: a
    name cannot say which one to attach.
    """
    if functions is None and (text := _filter_functions_text()) is not None:
        seen = Counter(matching_functions(text, pattern, modules=False))
    else:
        names = btf_functions() if functions is None else functions
        seen = Counter(n for n in names if fnmatch.fnmatchcase(n, pattern))
    own = TRACER_OWN_FUNCTIONS
    return sorted(
        n
        for n, count in seen.items()
        if count == 1 and not any(fnmatch.fnmatchcase(n, o) for o in own)
    )


# -- available_filter_functions ------------------------------------------------------


def _glob_regex(pattern: str) -> str:
    """fnmatch semantics for one function name: `*`, `?`, `[...]`, `[!...]`.

    Every pattern gives a valid regex (a reversed range such as `[z-a]` matches
    nothing, as in fnmatch); a wildcard or class never matches whitespace, so a
    match never runs past the name on its line.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(r"\S*")
        elif c == "?":
            out.append(r"\S")
        elif c == "[":
            start = i + 1 if pattern[i : i + 1] == "!" else i
            if pattern[start : start + 1] == "]":
                start += 1  # "[]...]" and "[!]...]": the first ] is a member
            end = pattern.find("]", start)
            if end < 0:
                out.append(r"\[")
                continue
            body = pattern[i:end]
            i = end + 1
            negate = body.startswith("!")
            out.append(_class_regex(body[1:] if negate else body, negate))
        elif c.isspace():
            out.append("(?!)")  # names hold no whitespace: nothing matches
        else:
            out.append(re.escape(c))
    return "".join(out)


def _class_regex(body: str, negate: bool) -> str:
    """The regex of one `[...]` class body: members and `a-z` ranges, as fnmatch."""
    items: list[str] = []
    k = 0
    while k < len(body):
        lo = body[k]
        if k + 2 < len(body) and body[k + 1] == "-":
            hi = body[k + 2]
            k += 3
            if lo <= hi:  # a reversed range is empty (re would refuse it)
                items.append(f"{_class_char(lo)}-{_class_char(hi)}")
        else:
            items.append(_class_char(lo))
            k += 1
    members = "".join(items)
    if negate:
        return rf"[^\s{members}]"
    return rf"(?!\s)[{members}]" if members else "(?!)"


def _class_char(c: str) -> str:
    # Escaped so that no member acts as a range, negation, set operation or escape.
    return "\\" + c if c in "\\]^-[&~|" else c


_FILTER_FUNCTIONS: dict[str, tuple[bytes, str]] = {}


def filter_functions_text(root: Path | str) -> str:
    """`available_filter_functions` under tracefs `root`, read once per process.

    The kernel builds the text afresh on every read (~50,000 lines). It changes
    only when modules come or go, so the copy is reused
    until /proc/modules says otherwise. OSError if it cannot be read.
    """
    key = str(root)
    try:
        with open("/proc/modules", "rb") as f:
            modules = f.read()
    except OSError:
        modules = b""
    cached = _FILTER_FUNCTIONS.get(key)
    if cached is not None and cached[0] == modules:
        return cached[1]
    with open(Path(root) / "available_filter_functions") as f:
        text = f.read()
    _FILTER_FUNCTIONS[key] = (modules, text)
    return text


def matching_functions(text: str, pattern: str, *, modules: bool = True) -> list[str]:
    """Names in `text` (available_filter_functions) matching the glob `pattern`.

    In file order, a name listed twice (static functions of one name) twice.
    One regex over the whole text, in C, not a Python loop of fnmatch calls
    over ~50,000 lines.
    `modules=False` leaves out module functions ("name [module]").
    """
    suffix = r"(?: \[[^\]\n]*\])?" if modules else ""
    # (?=\S): an empty line is no name, even for the pattern "*".
    rx = re.compile(rf"^(?=\S)({_glob_regex(pattern)}){suffix}$", re.MULTILINE)
    return rx.findall(text)
