"""The package's imports follow the layers of docs/architecture.md, without cycles,
and its layout tree names the paths that exist."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest_lbr

PACKAGE = Path(pytest_lbr.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return name.removeprefix("pytest_lbr.") if name != "pytest_lbr" else name


def _imports(package_dir: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (lazy imports inside functions too)."""
    modules = {_module_name(p, package_dir): p for p in package_dir.rglob("*.py")}
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


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    layers = _layers()
    return [
        f"{m} (layer {_layer_of(m, layers) + 1}) imports {d} (layer {_layer_of(d, layers) + 1})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if _layer_of(d, layers) > _layer_of(m, layers)
    ]


def test_every_import_goes_to_the_same_or_a_lower_layer() -> None:
    wrong = _upward_imports(_imports())
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_finds_a_planted_upward_import(tmp_path: Path) -> None:
    """Issue 52: the floors are enforced. A copy of the package where a kernel reader
    imports the symbolizer (layer 2 -> 4: kallsyms lives with the symbols) and the
    libbpf bindings import the harness (layer 1 -> 5) fails the check, naming both."""
    import shutil

    copy = tmp_path / "pytest_lbr"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "objects"))
    for module, line in (
        ("kernel/helpers.py", "from ..symbols import kallsyms"),
        ("bpf/libbpf.py", "from pytest_lbr.bpf.harness import BpfLoader"),
    ):
        path = copy / module
        path.write_text(path.read_text() + f"\n\ndef _planted():\n    {line}\n")
    assert _upward_imports(_imports(copy)) == [
        "bpf.libbpf (layer 1) imports bpf.harness (layer 5)",
        "kernel.helpers (layer 2) imports symbols.kallsyms (layer 4)",
    ]


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


def _layout() -> list[str]:
    """The paths of docs/architecture.md's package tree: a code block under "## Layout",
    one line a path (or several, comma-separated; globs allowed), indented under its folder."""
    text = (REPO / "docs" / "architecture.md").read_text()
    assert "\n## Layout\n" in text, "docs/architecture.md has no Layout section"
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert tree, "docs/architecture.md's Layout has no tree"
    folders: list[tuple[int, str]] = []  # (indent, path) of the folders enclosing a line
    paths = []
    for line in tree.group(1).splitlines():
        indent = len(line) - len(line.lstrip())
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        paths += [parent + name for name in names.split(", ")]
        if names.endswith("/"):
            folders.append((indent, parent + names))
    return paths


def test_the_layout_names_paths_that_exist() -> None:
    paths = _layout()
    assert len(paths) > 10, f"docs/architecture.md's tree names only {paths}"
    built = {"pytest_lbr/objects/"}  # made by the wheel build (setup.py), not in git
    missing = [p for p in paths if p not in built and not list(REPO.glob(p.rstrip("/")))]
    assert not missing, f"docs/architecture.md's layout names paths that do not exist: {missing}"


def test_the_layout_names_every_module_of_the_package() -> None:
    # Every folder and module, at any depth; a folder's line stands for its __init__.py.
    paths = _layout()
    entries = [
        f"{p.relative_to(PACKAGE.parent)}/"
        if p.is_dir()
        else str(p.relative_to(PACKAGE.parent).parent) + "/"
        if p.name == "__init__.py"
        else str(p.relative_to(PACKAGE.parent))
        for p in PACKAGE.rglob("*")
        if "__pycache__" not in p.parts
        and "objects" not in p.relative_to(PACKAGE).parts
        and (p.is_dir() or p.suffix == ".py")
    ]
    unnamed = [e for e in sorted(entries) if not any(fnmatch.fnmatchcase(e, p) for p in paths)]
    assert not unnamed, f"not in docs/architecture.md's layout: {unnamed}"


def _capture_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (PACKAGE / "capture").rglob("*.py")}


def test_no_isinstance_on_backend_classes_outside_capture() -> None:
    # Callers keep to the capture protocol (capture/base.py): a caller that needs
    # something of a backend grows the protocol, it does not test for the class.
    from pytest_lbr import capture

    backend_classes = {
        node.name
        for path in _capture_modules().values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    } - set(capture.__all__)
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        if PACKAGE / "capture" in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                continue
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            for kind in kinds:
                name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", "")
                if name in backend_classes:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}")
    assert not wrong, "isinstance on a backend class outside capture/:\n" + "\n".join(wrong)


def test_only_capture_imports_the_backends() -> None:
    # A backend is named once, in capture/__init__.py's REGISTRY: nothing outside
    # capture/ imports a backend module (and so picks a backend by its name).
    from pytest_lbr.capture import REGISTRY

    backends = {_module_name_of(spec.partition(":")[0]) for spec in REGISTRY.values()}
    wrong = [
        f"{m} imports {d}"
        for m, deps in sorted(_imports().items())
        if not m.startswith("capture")
        for d in sorted(deps & backends)
    ]
    assert not wrong, "\n".join(wrong)


#: Modules allowed over the size limit for now, each with why.
OVERSIZED: set[str] = set()
MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    sizes = {
        str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    big = [
        f"{name}: {n} lines"
        for name, n in sorted(sizes.items())
        if n > MAX_LINES and name not in OVERSIZED
    ]
    assert not big, f"modules over {MAX_LINES} lines (split them by job):\n" + "\n".join(big)
    stale = [name for name in OVERSIZED if sizes.get(name, 0) <= MAX_LINES]
    assert not stale, f"no longer over {MAX_LINES} lines: drop from OVERSIZED: {stale}"


def _tested_by(doc: str) -> list[str]:
    """The test paths a docstring names after "Tested by" (to the end of its paragraph): a
    path under tests/, or a test file's name in the folder of the path before it."""
    paths: list[str] = []
    for said in re.findall(r"Tested by\s+(.+?)(?:\n\s*\n|$)", doc, re.S):
        folder = "tests/"
        for word in re.findall(r"tests/[\w/*.]*[\w/*]|test_[\w*]+\.py", said):
            if word.startswith("tests/"):
                folder = word if word.endswith("/") else word.rpartition("/")[0] + "/"
                paths.append(word)
            else:
                paths.append(folder + word)
    return paths


def _module_test(path: Path) -> str:
    """Where a module's test is found: "" if nowhere. Tests mirror the package (the test of
    `X/y.py` is `tests/X/test_y.py`, or `tests/kernel/X/test_y.py` if it runs in the guests;
    of a folder's `__init__.py`, `tests/test_X.py`), or the folder's `__init__.py` names
    the module and says where it is tested ("Tested by tests/...")."""
    rel = path.relative_to(PACKAGE)
    parts = rel.parent.parts if rel.name == "__init__.py" else rel.with_suffix("").parts
    if parts:
        mirror = Path(*parts[:-1], f"test_{parts[-1]}.py")
        for root in ("tests", "tests/kernel"):
            if (REPO / root / mirror).is_file():
                return f"{root}/{mirror}"
    init = path if rel.name == "__init__.py" else path.parent / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    name = parts[-1] if parts else "pytest_lbr"
    named = rel.name == "__init__.py" or re.search(
        rf"(?<![\w/])(?:{name}\.py\b|`{name}`|`[\w.]+\.{name}`)", doc
    )
    said = _tested_by(doc)
    if named and said and all(list(REPO.glob(p.rstrip("/"))) for p in said):
        return f"named in {init.relative_to(PACKAGE.parent)}"
    return ""


#: Modules whose test is not found by their name for now, each with why.
UNNAMED_TESTS: dict[str, str] = {}


def test_every_module_has_its_test_found_by_its_name() -> None:
    found = {
        str(p.relative_to(PACKAGE.parent)): _module_test(p)
        for p in sorted(PACKAGE.rglob("*.py"))
        if "objects" not in p.parts
    }
    untested = [m for m, where in found.items() if not where and m not in UNNAMED_TESTS]
    assert not untested, (
        "no test found for (mirror it as tests/X/test_y.py, or name the module and its test"
        " after 'Tested by' in its folder's __init__.py):\n" + "\n".join(untested)
    )
    stale = [m for m in UNNAMED_TESTS if found.get(m)]
    assert not stale, f"their tests are found now: drop from UNNAMED_TESTS: {stale}"


def test_tested_by_names_paths_that_exist() -> None:
    wrong = [
        f"{p.relative_to(PACKAGE.parent)}: {said}"
        for p in sorted(PACKAGE.rglob("__init__.py"))
        for said in _tested_by(ast.get_docstring(ast.parse(p.read_text())) or "")
        if not list(REPO.glob(said.rstrip("/")))
    ]
    assert not wrong, "'Tested by' names tests that do not exist:\n" + "\n".join(wrong)


def test_no_three_modules_of_a_folder_share_a_prefix() -> None:
    # Three files with one prefix (`graph_*.py`) are a package waiting to exist.
    families = []
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]:
        prefixes: dict[str, list[str]] = {}
        for p in folder.glob("*.py"):
            if p.stem.partition("_")[0] and not p.stem.startswith("__"):
                prefixes.setdefault(p.stem.partition("_")[0], []).append(p.name)
        families += [
            f"{folder.relative_to(PACKAGE.parent)}/: {sorted(names)}"
            for names in prefixes.values()
            if len(names) >= 3
        ]
    assert not families, "make each a package:\n" + "\n".join(families)


def test_no_module_imports_another_modules_private_names() -> None:
    """A name one module shares with another is public (in its `__all__`): a private
    one imported elsewhere is an API nobody declared."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                ours = node.level > 0 or (node.module or "").startswith("pytest_lbr")
                for alias in node.names if ours else ():
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(PACKAGE.parent)}: {alias.name}")
    assert not found, found


#: A BPF opcode written as a number (an instruction's `code` compared, masked or set
#: to it), or an opcode constant defined: `bytecode.instructions` has them.
_OPCODE = re.compile(
    r"\b(?:code|op|opcode)\s*(?:==|!=|&|=|in)\s*[({]?\s*0x[0-9a-fA-F]{2}\b"
    r"|^\s*_?(?:BPF_)?(?:CLASS|OP|JMP|ALU|LD|ST|MODE|CALL|EXIT|PSEUDO)\w*\s*=\s*0x",
    re.M,
)
#: Building control flow: blocks, dominators, liveness (`bytecode.flow`, `bytecode.instrument`).
_FLOW = re.compile(
    r"^\s*(?:def \w*(?:dominator|basic_block|live_in|liveness)\w*|class Block\b)", re.M
)


#: Modules that decode x86-64 machine code (the JIT's output), whose opcodes are not BPF's.
_MACHINE_CODE = {"symbols/code_shapes.py"}


def test_bpf_instruction_knowledge_lives_in_bytecode() -> None:
    """Issue 52: no opcode number or control-flow construction outside `bytecode/`."""
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{text[: m.start()].count(chr(10)) + 1}: {m[0].strip()}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if "bytecode" not in p.relative_to(PACKAGE).parts
        and str(p.relative_to(PACKAGE)) not in _MACHINE_CODE
        for text in [p.read_text()]
        for pattern in (_OPCODE, _FLOW)
        for m in pattern.finditer(text)
    ]
    assert not found, "BPF instruction knowledge outside bytecode/:\n" + "\n".join(found)


def test_the_bytecode_check_finds_a_planted_opcode(tmp_path) -> None:
    planted = "CALL_OPCODE = 0x85\nif insn.code == 0x95:\n    pass\ndef _dominators(x):\n    pass\n"
    assert len(_OPCODE.findall(planted)) == 2 and len(_FLOW.findall(planted)) == 1


#: A comparison of a kind with a target kind's name: `t.kind == "prog"`,
#: `target.kind in ("uprobe", "uretprobe")`, `kind not in {"tp", ...}`.
_TARGET_KINDS = r"""["'](?:prog|kfunc|tp|uprobe|uretprobe)["']"""
_KIND_SWITCH = re.compile(
    rf"\bkind\s*(?:==|!=)\s*{_TARGET_KINDS}"
    rf"|{_TARGET_KINDS}\s*(?:==|!=)\s*[\w.]*\bkind\b"
    rf"|\bkind\s+(?:not\s+)?in\s*[(\[{{][^)\]}}]*{_TARGET_KINDS}"
)
#: Where a target's kind may be switched on: its parser, and the kinds' own modules.
_KIND_HOMES = ("targets.py", "capture/kinds/")


def _kind_switches(text: str) -> list[str]:
    return [m[0] for m in _KIND_SWITCH.finditer(text)]


def test_only_the_kinds_and_the_parser_switch_on_a_targets_kind() -> None:
    """Issue 52: what a kind of target does lives in its module of `capture/kinds/`."""
    found = [
        f"{p.relative_to(PACKAGE.parent)}: {switch}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if not str(p.relative_to(PACKAGE)).startswith(_KIND_HOMES)
        for switch in _kind_switches(p.read_text())
    ]
    assert not found, "a switch on a target's kind outside capture/kinds/:\n" + "\n".join(found)


def test_the_kind_check_finds_a_planted_switch(tmp_path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        'if t.kind == "prog":\n    pass\n'
        "elif target.kind in ('uprobe', 'uretprobe'):\n    pass\n"
        'elif kind not in {"kfunc", "tp"}:\n    pass\n'
        'elif "tp" != self.kind:\n    pass\n'
        # Other kinds than a target's are not its: a branch's, a scope's.
        'elif b.kind == "call" or scope.kind in ("system", "children"):\n    pass\n'
    )
    assert len(_kind_switches(planted.read_text())) == 4
