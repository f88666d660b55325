"""Golden traces, as a pytest plugin of its own: `--lbr-golden-update`,
`--lbr-golden-prune`, the `lbr_golden_exclude` / `lbr_golden_keep` ini keys, and
`GoldenBook`, the session's golden bookkeeping.

Each `check_golden` of a test goes through the book: the test's golden name (once per
test), its normalization (defaults, ini keys, marker knobs), the check itself
(`pytest_lbr.golden.GoldenCheck`), the files written under `--lbr-golden-update`, and
which golden files the session used, so the ones no test used are named (and deleted
under `--lbr-golden-prune`) at the end. Under pytest-xdist the workers hand what they
wrote and used to the controller. Registered by `pytest_lbr.plugin` (its
`pytest_plugins`); needs no tracing, so it runs without `--lbr` too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_lbr.plugin.shared import is_worker, option, option_group, record_of

if TYPE_CHECKING:
    from pytest_lbr.golden.normalize import Normalization
    from pytest_lbr.golden.unused import GoldenUsage
    from pytest_lbr.model import Trace

__all__ = ["GoldenBook", "golden_book"]

GOLDEN_KEY = pytest.StashKey["GoldenBook"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--lbr-golden-update",
        dest="lbr_golden_update",
        action="store_true",
        default=None,
        help="write/refresh golden traces instead of comparing",
    )
    group.addoption(
        "--lbr-golden-prune",
        dest="lbr_golden_prune",
        action="store_true",
        default=None,
        help="delete golden traces no test used (modules whose tests all ran and passed)",
    )
    parser.addini("lbr_golden_update", "default for --lbr-golden-update", type="bool")
    parser.addini("lbr_golden_prune", "default for --lbr-golden-prune", type="bool")
    parser.addini(
        "lbr_golden_exclude", "extra functions (globs) left out of golden traces", type="linelist"
    )
    parser.addini(
        "lbr_golden_keep",
        "functions (globs) kept in golden traces despite the default exclusions",
        type="linelist",
    )


def pytest_configure(config: pytest.Config) -> None:
    book = config.stash[GOLDEN_KEY] = GoldenBook(
        config,
        update=bool(option(config, "lbr_golden_update")),
        prune=bool(option(config, "lbr_golden_prune")),
        is_worker=is_worker(config),
    )
    # Registered as a plugin: its hooks below (pytest_runtest_logreport gets no config
    # and runs on the xdist controller for every worker's reports).
    config.pluginmanager.register(book, "lbr-golden")


def golden_book(config: pytest.Config) -> GoldenBook:
    """The session's golden bookkeeping."""
    return config.stash[GOLDEN_KEY]


class GoldenBook:
    """The golden checks of one pytest process (`update`: --lbr-golden-update;
    `prune`: --lbr-golden-prune)."""

    def __init__(
        self, config: pytest.Config, *, update: bool, prune: bool, is_worker: bool
    ) -> None:
        self.config = config
        self.update = update
        self.prune = prune
        self.is_worker = is_worker
        #: Golden files written in this process, and (controller) by the xdist workers.
        self.written: list[str] = []
        #: Golden checks per module (and, controller, the workers'), created by the first.
        self.usage: GoldenUsage | None = None
        #: Golden files no test used (deleted under --lbr-golden-prune), at the end.
        self.unused: list[Path] = []
        # What an unused golden file must not be blamed on: node ids of each module's
        # collected tests, modules with deselected tests, node ids that passed / failed.
        self._collected: dict[str, list[str]] = {}
        self._deselected: set[str] = set()
        self._narrowed = any("::" in str(arg) for arg in config.args)
        self._passed: set[str] = set()
        self._failed: set[str] = set()

    def normalization(self, item: pytest.Item) -> Normalization:
        """Default exclusions + ini `lbr_golden_exclude`/`lbr_golden_keep` + marker knobs."""
        from pytest_lbr.golden import Normalization
        from pytest_lbr.noise import DEFAULT_EXCLUDE

        marker = item.get_closest_marker("lbr")
        kw = marker.kwargs if marker else {}
        exclude = (
            *DEFAULT_EXCLUDE,
            *self.config.getini("lbr_golden_exclude"),
            *kw.get("exclude", ()),
        )
        keep = (*self.config.getini("lbr_golden_keep"), *kw.get("keep", ()))
        return Normalization(
            exclude=tuple(exclude),
            keep=tuple(keep),
            collapse=bool(kw.get("collapse", True)),
            sort_hits=bool(kw.get("sort_hits", False)),
        )

    def check(
        self,
        item: pytest.Item,
        trace: Trace,
        name: str | None = None,
        level: str = "function",
    ) -> None:
        """Compare `trace` with the test's golden file, or write it under --lbr-golden-update."""
        from pytest_lbr.golden import LEVELS, GoldenCheck
        from pytest_lbr.golden.storage import display_path

        record = record_of(item)
        test_name = _golden_test_name(item) + (f".{name}" if name else "")
        if test_name in record.golden_names:
            pytest.fail(
                f"check_golden called twice for {test_name!r}: pass name= to tell them apart",
                pytrace=False,
            )
        record.golden_names.add(test_name)
        record.checked_traces.append(trace)
        if level not in LEVELS:
            pytest.fail(
                f"unknown golden level {level!r}; choose from {', '.join(LEVELS)}", pytrace=False
            )
        module_path = Path(str(item.path))
        check = GoldenCheck(module_path, self.normalization(item), update=self.update)
        result = check.run(trace, test_name, level)
        record.golden.append(result)
        self._note_use(module_path, result.path)
        shown = display_path(result.path)
        if result.status == "written":
            self.note_written(shown)
        item.user_properties.append(("lbr_golden", f"{result.status}: {shown}"))
        if not result.passed:
            pytest.fail(result.message, pytrace=False)

    def _note_use(self, module_path: Path, path: Path) -> None:
        module = str(module_path)
        complete = not self._narrowed and module not in self._deselected
        self._usage().note(module_path, self._collected.get(module, ()), complete, path)

    def _usage(self) -> GoldenUsage:
        if self.usage is None:  # only sessions that check golden traces import it
            from pytest_lbr.golden.unused import GoldenUsage

            self.usage = GoldenUsage()
        return self.usage

    def note_written(self, path: str) -> None:
        """A golden file this process wrote (a worker also tells the controller)."""
        self.written.append(path)
        if self.is_worker:  # the controller prints one summary for all workers
            self.config.workeroutput.setdefault("lbr_written", []).append(path)  # type: ignore[attr-defined]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Hook, xdist controller: what a worker wrote and which golden files it used."""
        output = getattr(node, "workeroutput", {})
        self.written.extend(output.get("lbr_written", []))
        if output.get("lbr_golden_usage"):
            self._usage().merge(output["lbr_golden_usage"])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Hook: each module's tests, for unused golden files (per xdist worker: they
        all collect the same tests; the controller collects none)."""
        for item in session.items:
            self._collected.setdefault(str(item.path), []).append(item.nodeid)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Hook: a module with deselected tests (-k, --lbr-shard...) may have used more golden
        files than this session saw."""
        self._deselected.update(str(item.path) for item in items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hook, also on the xdist controller: which tests passed and failed (a file of
        a failed test is not unused)."""
        if report.failed:
            self._failed.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self._passed.add(report.nodeid)

    def pytest_sessionfinish(self) -> None:
        """Hook: a worker hands its usage to the controller; the controller names the unused
        golden files (and deletes them under --lbr-golden-prune)."""
        if self.usage and self.is_worker:
            self.config.workeroutput["lbr_golden_usage"] = self.usage.to_json()  # type: ignore[attr-defined]
        elif self.usage:
            self.unused = self.usage.unused(self._passed - self._failed)
            if self.prune:
                for path in self.unused:
                    path.unlink(missing_ok=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Hook: golden files written and unused, in the terminal summary."""
        terminal = terminalreporter
        if self.is_worker:
            return
        if self.written:
            terminal.write_sep("-", f"lbr: {len(self.written)} golden trace(s) written")
            for path in sorted(self.written):
                terminal.write_line(f"  {path}")
        if self.unused:
            from pytest_lbr.golden.storage import display_path

            head = f"lbr: {len(self.unused)} unused golden trace(s)"
            shown = ", ".join(display_path(path) for path in self.unused)
            if self.prune:
                terminal.write_line(f"{head} deleted: {shown}")
            else:
                terminal.write_line(f"{head}: {shown} (--lbr-golden-prune deletes them)")


def _golden_test_name(item: pytest.Item) -> str:
    # "test_mod.py::TestX::test_y[a]" -> "TestX.test_y[a]": unique within the module.
    from pytest_lbr.golden.storage import safe_file_name

    parts = item.nodeid.split("::")[1:]
    return safe_file_name(".".join(parts) or item.name)
