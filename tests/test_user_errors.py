"""A user's mistakes in a test fail in one line with the fix, at the test's own line,
without a traceback through the plugin (docs/errors.md). These need no tracing kernel:
the object checks happen before libbpf is asked, and bcc is hidden from the inner
session the way a venv without system site-packages hides it.
The target errors inside `with lbr.trace(...)` need one: tests/kernel/test_faults.py."""

from __future__ import annotations

import pytest

from pytest_lbr.errors import BCC_MISSING

pytest_plugins = ["pytester"]

# What Python raises when bcc is not installed, for every import of it in the inner
# session (the host's venv sees Debian's python3-bpfcc through system site-packages).
HIDE_BCC = """
import sys

class _NoBcc:
    def find_spec(self, name, path=None, target=None):
        if name == "bcc" or name.startswith("bcc."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoBcc())
sys.modules.pop("bcc", None)
"""


def _one_line(result: pytest.RunResult, *parts: str) -> str:
    out = result.stdout.str() + result.stderr.str()
    lines = [ln for ln in out.splitlines() if all(p in ln for p in parts)]
    assert lines, f"{parts!r} not on one line of:\n{out}"
    for noise in ("Traceback", "pytest_lbr/", "/site-packages/"):
        assert noise not in out, out
    return lines[0]


def test_missing_object_names_every_place_tried(pytester: pytest.Pytester) -> None:
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_load.py").write_text(
        "def test_load(bpf):\n    bpf.load('build/missing.bpf.o')\n"
    )
    result = pytester.runpytest("tests")
    result.assert_outcomes(failed=1)
    line = _one_line(result, "tests/test_load.py:2: BpfObjectNotFound: ")
    assert (
        f"BPF object not found (build it first?); tried {pytester.path}/tests/build/missing.bpf.o "
        f"(beside the test module), {pytester.path}/build/missing.bpf.o (working directory): "
        "'build/missing.bpf.o'"
    ) in line


def test_relative_object_is_found_beside_the_module_then_in_the_cwd(
    pytester: pytest.Pytester,
) -> None:
    from pytest_lbr.bpf import BpfLoader

    (pytester.path / "tests" / "build").mkdir(parents=True)
    (pytester.path / "build").mkdir()
    beside = pytester.path / "tests" / "build" / "x.bpf.o"
    in_cwd = pytester.path / "build" / "x.bpf.o"
    in_cwd.write_bytes(b"")
    loader = BpfLoader(pytester.path / "tests")
    assert loader.resolve("build/x.bpf.o") == in_cwd
    beside.write_bytes(b"")
    assert loader.resolve("build/x.bpf.o") == beside  # the module's directory wins


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not an object at all\n", "is not an ELF file (expected a clang -target bpf .o)"),
        (
            b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x01\x00\x3e\x00" + bytes(44),
            "is an ELF file but not a BPF object (e_machine != EM_BPF)",
        ),
    ],
    ids=["not-elf", "elf-not-bpf"],
)
def test_invalid_object_is_one_line(
    pytester: pytest.Pytester, content: bytes, message: str
) -> None:
    (pytester.path / "prog.bpf.o").write_bytes(content)
    pytester.makepyfile(test_load="def test_load(bpf):\n    bpf.load('prog.bpf.o')\n")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    _one_line(result, "test_load.py:2: NotABpfObject: ", f"prog.bpf.o {message}")


def test_bcc_missing_in_a_test_is_one_line_with_the_fix(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HIDE_BCC)
    pytester.makepyfile(
        test_bcc="def test_bcc_program():\n    from bcc import BPF\n    BPF(text='')\n"
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    _one_line(result, "test_bcc.py:2: ModuleNotFoundError: No module named 'bcc': ", BCC_MISSING)


def test_bcc_missing_at_import_is_one_line_with_the_fix(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HIDE_BCC)
    pytester.makepyfile(test_bcc="from bcc import BPF\n\ndef test_bcc_program():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    _one_line(result, "test_bcc.py: cannot import bcc: ", BCC_MISSING)


def test_the_software_pmu_on_the_graph_backend_says_which_backend_takes_it() -> None:
    # Checked before anything is loaded: no kernel needed.
    from pytest_lbr.capture import open_capture

    with pytest.raises(ValueError) as err:
        open_capture("graph", [], pmu="software")
    assert str(err.value) == (
        "the graph backend does not run on --lbr-pmu=software (only lbr does): "
        "drop --lbr-pmu or pick that backend"
    )
