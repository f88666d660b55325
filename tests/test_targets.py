"""Target parsing: every form of the contract, and one clear line for bad input."""

from __future__ import annotations

import pytest

from pytest_lbr.targets import Target, TargetError, parse_target, parse_targets


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (123, Target("prog", "prog:123", prog_id=123)),
        ("123", Target("prog", "prog:123", prog_id=123)),
        ("prog:123", Target("prog", "prog:123", prog_id=123)),
        ("prog:name:xdp_count", Target("prog", "prog:name:xdp_count", prog_name="xdp_count")),
        (
            "prog:tag:A04F5EEF06A7F555",
            Target("prog", "prog:tag:A04F5EEF06A7F555", prog_tag="a04f5eef06a7f555"),
        ),
        (
            "prog:pinned:/sys/fs/bpf/my_prog",
            Target("prog", "prog:pinned:/sys/fs/bpf/my_prog", pin_path="/sys/fs/bpf/my_prog"),
        ),
        (
            "kfunc:tcp_v4_connect",
            Target("kfunc", "kfunc:tcp_v4_connect", function="tcp_v4_connect"),
        ),
        (
            "tp:syscalls/sys_enter_getpid",
            Target("tp", "tp:syscalls/sys_enter_getpid", tracepoint="syscalls/sys_enter_getpid"),
        ),
        (
            "uretprobe:/usr/bin/app:parse_request",
            Target(
                "uretprobe",
                "uretprobe:/usr/bin/app:parse_request",
                binary="/usr/bin/app",
                function="parse_request",
            ),
        ),
    ],
)
def test_forms_of_the_contract(text: object, expected: Target) -> None:
    assert parse_target(text) == expected


def test_glob_is_detected() -> None:
    assert parse_target("kfunc:tcp_*").is_glob
    assert not parse_target("kfunc:tcp_v4_connect").is_glob


def test_object_with_fd_is_a_program_target() -> None:
    class BccFunction:  # the shape of bcc's BPF.Function: name + fd
        name = b"xdp_prog"
        fd = 7

    class Program:
        name = "xdp_count"
        fd = 9

    t = parse_target(Program())
    assert (t.kind, t.prog_fd, t.spec) == ("prog", 9, "prog:name:xdp_count")
    bcc = parse_target(BccFunction())
    assert (bcc.prog_fd, bcc.spec) == (7, "prog:name:xdp_prog")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("prog:tag:xyz", "a program tag is 16 hex digits"),
        ("kfunc:", "expected"),
        ("kfunc:tcp v4", "not a kernel function name or glob"),
        ("tp:getpid", "expected 'tp:CATEGORY/NAME'"),
        ("uprobe:/bin/true", "expected 'uprobe:/path/to/binary:SYMBOL'"),
        ("kprobe:foo", "unknown kind 'kprobe'"),
        (0, "bad target '0': a BPF program id is an integer from 1 to 4294967295"),
        (-1, "bad target '-1': a BPF program id is an integer from 1 to 4294967295"),
        # Regression: ids above 2**32 were accepted (the kernel's ids are u32).
        (1 << 32, "bad target '4294967296': a BPF program id is an integer from 1 to"),
        ("4294967296", "bad target '4294967296': a BPF program id is an integer from 1"),
        ("prog:4294967296", "bad target 'prog:4294967296': a BPF program id is an integer"),
        (1 << 5000, "bad target (an int of 5001 bits): a BPF program id is an integer"),
        ("9" * 5000, "bad target '9999999999999999999999999999999999999999'...: a BPF"),
        (True, "bad target True"),
        (3.5, "bad target 3.5"),
    ],
)
def test_bad_targets_say_what_is_accepted(bad: object, message: str) -> None:
    with pytest.raises(TargetError) as info:
        parse_target(bad)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_no_targets_is_an_error() -> None:
    with pytest.raises(TargetError, match="no target given"):
        parse_targets(())
