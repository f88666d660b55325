"""The README's first example is a real test: examples/xdp_counter runs it verbatim."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first_python_block(text: str) -> str:
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found, "README.md has no python example"
    return found.group(1)


def test_the_readme_first_example_is_run_verbatim_by_an_example_test() -> None:
    snippet = _first_python_block((REPO / "README.md").read_text())
    example = (REPO / "examples" / "xdp_counter" / "test_xdp_counter.py").read_text()
    assert snippet in example
    assert 'trace.called("bpf_map_lookup_elem", by="xdp_count")' in snippet
