"""Target strings and objects that `lbr.trace(...)` accepts, parsed into `Target`s.

Parsing is pure: nothing here touches the kernel. Resolving a BPF program target
to a live program (by id, name, tag or pin) happens in `pytest_lbr.capture`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pytest_lbr.errors import UserError

__all__ = ["Target", "TargetError", "parse_target", "parse_targets"]

_TAG_RE = re.compile(r"^[0-9a-f]{16}$")
_FUNC_RE = re.compile(r"^[A-Za-z0-9_.*?\[\]]+$")
_TP_RE = re.compile(r"^[A-Za-z0-9_]+/[A-Za-z0-9_]+$")

_FORMS = (
    "a Program, an object with a BPF program .fd, 123, 'prog:123', 'prog:name:NAME', "
    "'prog:tag:TAG', 'prog:pinned:/sys/fs/bpf/PATH', 'kfunc:FUNC' or 'kfunc:GLOB*', "
    "'tp:CATEGORY/NAME', 'uprobe:/path/bin:SYMBOL', 'uretprobe:/path/bin:SYMBOL'"
)


class TargetError(UserError, ValueError):
    """A target that cannot be parsed or resolved; the message is one actionable line."""


@dataclass(frozen=True)
class Target:
    """One thing to trace.

    kind is one of "prog", "kfunc", "tp", "uprobe", "uretprobe". For "prog",
    exactly one of `prog_fd`, `prog_id`, `prog_name`, `prog_tag`, `pin_path` is set.
    """

    kind: str
    spec: str
    prog_fd: int | None = None
    prog_id: int | None = None
    prog_name: str | None = None
    prog_tag: str | None = None
    pin_path: str | None = None
    #: kfunc name or glob; uprobe symbol.
    function: str | None = None
    #: tracepoint "category/name"; uprobe binary path.
    tracepoint: str | None = None
    binary: str | None = None
    #: The object the user passed (kept alive while traced), if any.
    obj: Any = None

    @property
    def is_glob(self) -> bool:
        """A kernel-function glob (``kfunc:GLOB*``): several functions."""
        return self.kind == "kfunc" and any(c in (self.function or "") for c in "*?[")

    @property
    def is_program(self) -> bool:
        """A BPF program target (what `pytest_lbr.programs.find` resolves)."""
        return self.kind == "prog"

    @property
    def kind_label(self) -> str:
        """The kind as `Capabilities.retval` names it ("kfunc glob" for a glob)."""
        return f"{self.kind} glob" if self.is_glob else self.kind

    def __str__(self) -> str:
        return self.spec


def parse_target(target: Any) -> Target:
    """Parse one target of the contract; raise TargetError (one line, with the
    accepted forms) for anything else."""
    if isinstance(target, Target):
        return target
    if isinstance(target, bool):
        raise TargetError(f"bad target {target!r}: expected {_FORMS}")
    if isinstance(target, int):
        return _prog_id(target, None)
    if isinstance(target, str):
        return _parse_str(target.strip())
    fd = getattr(target, "fd", None)
    if isinstance(fd, int) and fd >= 0:
        name = getattr(target, "name", None)
        if isinstance(name, bytes):  # bcc's BPF.Function.name
            name = name.decode(errors="replace")
        spec = f"prog:name:{name}" if isinstance(name, str) and name else f"prog:fd:{fd}"
        return Target("prog", spec, prog_fd=fd, obj=target)
    raise TargetError(f"bad target {target!r}: expected {_FORMS}")


def parse_targets(targets: tuple[Any, ...] | list[Any]) -> list[Target]:
    """Parse several targets; at least one is required."""
    if not targets:
        raise TargetError(f"no target given: expected one or more of {_FORMS}")
    return [parse_target(t) for t in targets]


#: The largest BPF program id: the kernel's ids are u32 (`bpf_attr.prog_id`).
MAX_PROG_ID = (1 << 32) - 1
_ID_RANGE = f"a BPF program id is an integer from 1 to {MAX_PROG_ID}"


def _prog_id(value: int, spec: str | None) -> Target:
    """A program id target; `spec` is what the user wrote (None: the int `value`)."""
    if not 0 < value <= MAX_PROG_ID:
        raise TargetError(f"bad target {_quoted(spec, value)}: {_ID_RANGE}")
    return Target("prog", f"prog:{value}", prog_id=value)


def _quoted(spec: str | None, value: int) -> str:
    """The target as the user wrote it, cut to 40 characters for a one-line message."""
    if spec is None:
        # str() refuses ints of more than 4300 digits (sys.get_int_max_str_digits).
        if value.bit_length() > 128:
            return f"(an int of {value.bit_length()} bits)"
        spec = str(value)
    return repr(spec[:40]) + ("..." if len(spec) > 40 else "")


def _is_id(text: str) -> bool:
    # ASCII only: str.isdigit() is also true of "²", which int() refuses.
    return text.isascii() and text.isdigit()


def _parse_id(text: str, spec: str) -> Target:
    try:
        value = int(text)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        raise TargetError(f"bad target {_quoted(spec, 0)}: {_ID_RANGE}") from None
    return _prog_id(value, spec)


def _parse_str(text: str) -> Target:
    kind, sep, rest = text.partition(":")
    if _is_id(text):
        return _parse_id(text, text)
    if not sep or not rest:
        raise TargetError(f"bad target {text!r}: expected {_FORMS}")
    if kind == "prog":
        return _parse_prog(text, rest)
    if kind == "kfunc":
        if not _FUNC_RE.match(rest):
            raise TargetError(f"bad target {text!r}: not a kernel function name or glob")
        return Target("kfunc", text, function=rest)
    if kind == "tp":
        if not _TP_RE.match(rest):
            raise TargetError(f"bad target {text!r}: expected 'tp:CATEGORY/NAME'")
        return Target("tp", text, tracepoint=rest)
    if kind in ("uprobe", "uretprobe"):
        binary, colon, symbol = rest.rpartition(":")
        if not colon or not binary or not symbol:
            raise TargetError(f"bad target {text!r}: expected '{kind}:/path/to/binary:SYMBOL'")
        return Target(kind, text, binary=binary, function=symbol)
    raise TargetError(f"bad target {text!r}: unknown kind {kind!r}; expected {_FORMS}")


def _parse_prog(text: str, rest: str) -> Target:
    if _is_id(rest):
        return _parse_id(rest, text)
    how, sep, value = rest.partition(":")
    if not sep or not value:
        raise TargetError(f"bad target {text!r}: expected {_FORMS}")
    if how == "name":
        return Target("prog", text, prog_name=value)
    if how == "tag":
        tag = value.lower()
        if not _TAG_RE.match(tag):
            raise TargetError(f"bad target {text!r}: a program tag is 16 hex digits")
        return Target("prog", text, prog_tag=tag)
    if how == "pinned":
        return Target("prog", text, pin_path=value)
    raise TargetError(
        f"bad target {text!r}: expected prog:ID, prog:name:, prog:tag: or prog:pinned:"
    )
