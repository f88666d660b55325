"""Golden files no test used, found the way syrupy finds unused snapshots.

A golden file is unused when the test it is named after did not check a golden
trace in a session that ran its whole module. Deleting a file that is still needed
costs a re-recording in every kernel, so this errs towards silence: a module is
only looked at if one of its tests made a golden check, none of its tests was left
out (`-k`, a node id narrower than the module, a shard) and every one of them
passed (a test that failed or was skipped may not have reached its golden check).
Variants (`<test>@6.12.lbr`) of a test that checked are not unused: they are for
another kernel.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_lbr.golden.storage import golden_name, unused_files

__all__ = ["GoldenUsage"]


@dataclass
class _Module:
    #: Node ids of the module's collected tests.
    tests: set[str] = field(default_factory=set)
    #: Every test of the module was selected.
    complete: bool = True
    #: Golden names (file names without series and suffix) its tests checked.
    names: set[str] = field(default_factory=set)


class GoldenUsage:
    """Which golden files a session's tests checked, per test module."""

    def __init__(self) -> None:
        self._modules: dict[str, _Module] = {}

    def __bool__(self) -> bool:
        return bool(self._modules)

    def note(self, module_path: Path, tests: Iterable[str], complete: bool, path: Path) -> None:
        """A test of `module_path` checked golden file `path`; `tests` are the module's
        collected node ids, `complete` says whether none of them was deselected."""
        module = self._modules.setdefault(str(module_path), _Module())
        module.tests.update(tests)
        module.complete = module.complete and complete and bool(module.tests)
        module.names.add(golden_name(path))

    def to_json(self) -> dict[str, Any]:
        """Plain data (for an xdist worker's output); `merge` reads it back."""
        return {
            path: {"tests": sorted(m.tests), "complete": m.complete, "names": sorted(m.names)}
            for path, m in self._modules.items()
        }

    def merge(self, data: dict[str, Any]) -> None:
        """Add what another process (an xdist worker) noted."""
        for path, m in data.items():
            module = self._modules.setdefault(path, _Module())
            module.tests.update(m["tests"])
            module.complete = module.complete and m["complete"]
            module.names.update(m["names"])

    def unused(self, passed: Container[str]) -> list[Path]:
        """Golden files no test checked, in modules whose tests all ran and `passed`."""
        found: list[Path] = []
        for path, module in sorted(self._modules.items()):
            if module.complete and all(t in passed for t in module.tests):
                found.extend(unused_files(Path(path), module.names))
        return found
