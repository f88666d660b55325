"""A user-space program traced with uprobe/uretprobe: the tests build the
small key-value store in uprobe/kvstore.c with gcc and run it."""

import shutil
import subprocess
from pathlib import Path

import pytest

CMD_GET, CMD_SET = 1, 2


@pytest.fixture
def kvstore(tmp_path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path / "kvstore"
    src = Path(__file__).parent / "kvstore.c"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(src)], check=True)
    return out


@pytest.mark.allow_skip  # backends without user-space probes skip with the reason
def test_parse_request_sees_every_request(kvstore, lbr):
    requests = ["SET colour blue", "GET colour", "PING"]
    try:
        with lbr.trace(
            f"uprobe:{kvstore}:parse_request", f"uretprobe:{kvstore}:parse_request"
        ) as trace:
            out = subprocess.run(
                [str(kvstore), *requests], capture_output=True, text=True, check=True
            )
    except RuntimeError as exc:  # CaptureError: this backend cannot attach uprobes
        if "not supported" not in str(exc):
            raise
        pytest.skip(str(exc))

    assert out.stdout.split("\n")[:3] == ["OK", "blue", "ERR syntax"]
    entries = [h for h in trace.hits if h.target.startswith("uprobe:")]
    returns = [h.retval for h in trace.hits if h.target.startswith("uretprobe:")]
    assert len(entries) == len(requests)
    assert returns == [CMD_SET, CMD_GET, -1]
