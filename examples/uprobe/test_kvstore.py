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


def test_parse_request_sees_every_request(kvstore, lbr):
    requests = ["SET colour blue", "GET colour", "PING"]
    with lbr.trace(
        f"uprobe:{kvstore}:parse_request", f"uretprobe:{kvstore}:parse_request"
    ) as trace:
        out = subprocess.run([str(kvstore), *requests], capture_output=True, text=True, check=True)

    assert out.stdout.split("\n")[:3] == ["OK", "blue", "ERR syntax"]
    entries = [h for h in trace.hits if h.target.startswith("uprobe:")]
    returns = [h.retval for h in trace.hits if h.target.startswith("uretprobe:")]
    assert len(entries) == len(requests)
    # parse_request returns an int: -1 is -1, not 0xffffffff
    assert returns == [CMD_SET, CMD_GET, -1]
    # Each entry hit ends with the user-space call into the probed function.
    assert trace.called("parse_request", by="handle")
