"""docs/ci.md's CI templates stay valid CI files.

Users copy the GitHub Actions workflow and the GitLab CI job as they are, so each is
checked against the schema its CI service publishes, as vendored by check-jsonschema
(`vendor.github-workflows`, `vendor.gitlab-ci`): no network, and a schema version
that changes only when the test extras are upgraded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The vendored schema of each template, in the order docs/ci.md shows them.
SCHEMAS = ("vendor.github-workflows", "vendor.gitlab-ci")


def _templates() -> list[str]:
    text = (REPO / "docs" / "ci.md").read_text()
    return re.findall(r"```yaml\n(.*?)```", text, re.S)


def _check_jsonschema() -> str:
    # The venv's own script first: the suite may run with a venv that is not on PATH.
    beside = Path(sys.executable).with_name("check-jsonschema")
    found = str(beside) if beside.exists() else shutil.which("check-jsonschema")
    if found is None:
        pytest.fail("check-jsonschema missing: pip install 'pytest-lbr[test]'")
    return found


def _validate(schema: str, text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{schema}.yml"
    path.write_text(text)
    return subprocess.run(
        [_check_jsonschema(), "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_docs_show_one_template_per_schema() -> None:
    assert len(_templates()) == len(SCHEMAS), "docs/ci.md: a GitHub workflow, a GitLab job"


@pytest.mark.parametrize("index", range(len(SCHEMAS)), ids=SCHEMAS)
def test_template_is_valid_for_its_ci_service(index: int, tmp_path: Path) -> None:
    done = _validate(SCHEMAS[index], _templates()[index], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "schema,text",
    [
        # A job without `runs-on` or `steps` is not a GitHub Actions job.
        ("vendor.github-workflows", "on: [push]\njobs:\n  kernel:\n    stepz: []\n"),
        # `script` must be a string or a list of them.
        ("vendor.gitlab-ci", "kernel-tests:\n  script: {run: 1}\n"),
    ],
    ids=SCHEMAS,
)
def test_the_schemas_refuse_a_broken_template(schema: str, text: str, tmp_path: Path) -> None:
    """The check can fail: a broken file of each kind is refused by the same call."""
    done = _validate(schema, text, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr


#: The kernel variable of each template: the matrix entry every step uses.
KERNEL_VARIABLES = (r"\$\{\{ matrix\.kernel \}\}", r"\$KERNEL\b")


@pytest.mark.parametrize("index", range(len(SCHEMAS)), ids=SCHEMAS)
def test_each_template_pins_its_kernels_in_one_place(index: int) -> None:
    """The kernel releases are written once (the matrix); the cache key, the package
    installed and `pytest-lbr vm --kernel` all take them from there, and nothing
    installs an unpinned kernel meta-package."""
    from pytest_lbr.vm.root import is_release

    text = _templates()[index]
    releases = re.findall(r"\b\d+\.\d+\.\d+[-+][\w.+~-]*-amd64\b", text)
    assert len(releases) == 2 and len(set(releases)) == 2, releases
    assert all(is_release(r) for r in releases)
    assert not re.search(r"linux-image-(amd64|6\.\d+-amd64)\b", text), "an unpinned kernel"
    var = KERNEL_VARIABLES[index]
    assert re.search(rf"key: kernel-{var}", text), "the cache is not keyed on the pin"
    assert re.search(rf'apt-get download "linux-image-{var}"', text)
    assert re.search(rf"pytest-lbr vm --kernel {var} ", text)
