"""The package's imports follow the layers of docs/architecture.md, without cycles,
and the README's layout table names paths that exist."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest_lbr

PACKAGE = Path(pytest_lbr.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return name.removeprefix("pytest_lbr.") if name != "pytest_lbr" else name


def _imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports (lazy imports inside functions too)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from ..model import X
                    base = package.split(".") if package != "pytest_lbr" else []
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    mod = ".".join([*base, node.module] if node.module else base)
                    mod = f"pytest_lbr.{mod}" if mod else "pytest_lbr"
                else:
                    mod = node.module or ""
                # `from pkg import submodule` depends on the submodule
                targets = [
                    f"{mod}.{a.name}" if _module_name_of(f"{mod}.{a.name}") in modules else mod
                    for a in node.names
                ]
            else:
                continue
            for t in targets:
                if t == "pytest_lbr" or t.startswith("pytest_lbr."):
                    dep = _module_name_of(t)
                    if dep in modules and dep != name:
                        deps.add(dep)
        graph[name] = deps
    return graph


def _module_name_of(dotted: str) -> str:
    return dotted.removeprefix("pytest_lbr.") if dotted != "pytest_lbr" else dotted


def _layers() -> list[list[str]]:
    """The module patterns of each layer, lowest first, from docs/architecture.md."""
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.+?) \| .+ \|$", text, re.M)
    assert rows, "docs/architecture.md has no layer table"
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    return [re.findall(r"`([^`]+)`", cells) for _, cells in rows]


def _layer_of(module: str, layers: list[list[str]]) -> int:
    found = [
        i for i, pats in enumerate(layers) if any(fnmatch.fnmatchcase(module, p) for p in pats)
    ]
    assert len(found) == 1, f"{module} is in {len(found)} layers of docs/architecture.md"
    return found[0]


def test_every_import_goes_to_the_same_or_a_lower_layer() -> None:
    layers = _layers()
    graph = _imports()
    wrong = [
        f"{m} (layer {_layer_of(m, layers) + 1}) imports {d} (layer {_layer_of(d, layers) + 1})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if _layer_of(d, layers) > _layer_of(m, layers)
    ]
    assert not wrong, "\n".join(wrong)


def test_there_is_no_import_cycle() -> None:
    graph = _imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_readme_layout_names_paths_that_exist() -> None:
    text = (REPO / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| (.+?) \|", table, re.M)
    built = {"pytest_lbr/objects/"}  # made by the wheel build (setup.py), not in git
    named = 0
    for cell in cells:
        paths = re.findall(r"`([^`]+)`", cell)
        for i, path in enumerate(paths):
            # `pytest_lbr/vm.py`, `guest.py`: a bare name lives beside the cell's first path
            if i and "/" not in path:
                path = str(Path(paths[0]).parent / path)
            named += 1
            if path not in built:
                assert (REPO / path).exists(), f"README layout names {path}, which does not exist"
    assert named, "README.md has no layout table"
