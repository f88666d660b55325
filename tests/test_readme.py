"""The README's example commands print what the README says they print."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.commands import PYTEST_LBR

REPO = Path(__file__).resolve().parent.parent


def _shown_session(command_prefix: str) -> tuple[list[str], str]:
    """The `$ command` (with continuation lines) and the output shown under it."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```\n\$ (" + re.escape(command_prefix) + r".*?)\n```", text, re.S)
    assert block, f"README shows no `$ {command_prefix}` session"
    lines = block.group(1).split("\n")
    cmd = lines.pop(0)
    while cmd.endswith("\\"):
        cmd = cmd[:-1] + " " + lines.pop(0).strip()
    return shlex.split(cmd), "\n".join(lines)


def test_readme_golden_diff_is_the_real_output() -> None:
    argv, shown = _shown_session("pytest-lbr diff")
    out = subprocess.run(
        [PYTEST_LBR, *argv[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1  # the files differ
    assert out.stdout.strip() == shown.strip()


def test_readme_commands_exist() -> None:
    text = (REPO / "README.md").read_text()
    for script in re.findall(r"^(ci/\w+|ci/qemu/\w+)\b", text, re.M):
        assert (REPO / script).is_file(), script


def test_readme_first_example_is_run_verbatim_by_an_example_test() -> None:
    found = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert found, "README.md has no python example"
    snippet = found.group(1)
    example = (REPO / "examples" / "xdp_counter" / "test_xdp_counter.py").read_text()
    assert snippet in example
    assert 'trace.called("bpf_map_lookup_elem", by="xdp_count")' in snippet
