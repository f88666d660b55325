"""`pytest-lbr bisect --here` over a BPF program's own history, in the guest.

The test writes a small project the way a BPF author keeps one: an XDP program
built by a Makefile with clang `-target bpf`, a golden test using the `bpf` and
`lbr` fixtures, its golden trace recorded here (it depends on the kernel). Then a
history of 8 more commits: harmless ones, one that breaks the build (and the next
that fixes it), and one that adds a `bpf_csum_diff()` call, which changes the traced
call path. The bisection must name that commit, list the broken one as skipped
(never blame it), show the golden diff, and give the checkout back as it was.

It passes in the 6.1 and 6.12 guests. It runs an inner pytest session for the
recording and one per tested commit (4-5 of them), each mostly the graph backend
turning the function tracer on and off, so it is slow, and a second kernel tells
nothing new: CI runs it in the 6.12 guest only (`one_kernel`, tests/kernel/conftest.py;
its guest time is in bench/RESULTS-history.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.commands import PYTEST_LBR, PYTEST_QUIET

pytestmark = [pytest.mark.kernel, pytest.mark.one_kernel("6.12")]

PROGRAM = """\
// SPDX-License-Identifier: GPL-2.0
/* Count packets; revision {revision}. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {{
\t__uint(type, BPF_MAP_TYPE_HASH);
\t__uint(max_entries, 16);
\t__type(key, __u32);
\t__type(value, __u64);
}} seen SEC(".maps");

SEC("xdp")
int count_packets(struct xdp_md *ctx)
{{
\tvoid *data = (void *)(long)ctx->data;
\tvoid *data_end = (void *)(long)ctx->data_end;
\t__u32 key = 0;
\t__u64 one = 1, *n;

\tif (data + 8 > data_end)
\t\treturn XDP_ABORTED;
{checksum}\tn = bpf_map_lookup_elem(&seen, &key);
\tif (n)
\t\t__sync_fetch_and_add(n, 1);
\telse
\t\tbpf_map_update_elem(&seen, &key, &one, BPF_NOEXIST);
\t{ret} XDP_PASS;
}}

char LICENSE[] SEC("license") = "GPL";
"""
#: The seeded change: a helper call, so a new edge in the traced path.
CHECKSUM = "\tkey = bpf_csum_diff(0, 0, data, 8, 0) & 1;\n"

MAKEFILE = """\
MULTIARCH := $(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
.DELETE_ON_ERROR:
build/prog.bpf.o: prog.bpf.c
\tmkdir -p build
\tclang -g -O2 -target bpf -Wall -Werror -idirafter /usr/include/$(MULTIARCH) -c $< -o $@
"""

TEST = """\
from pathlib import Path

import pytest

OBJECT = Path(__file__).parent / "build" / "prog.bpf.o"


@pytest.mark.kernel
def test_count_packets(bpf, lbr):
    prog = bpf.load(OBJECT).programs["count_packets"]
    with lbr.trace(prog) as trace:
        assert prog.run(data=bytes(64)).retval == 2  # XDP_PASS
    lbr.check_golden(trace)
"""

ARGS = ("test_prog.py", "-q", "--lbr", "--lbr-backend=graph", *PYTEST_QUIET)
#: After the commit that records the golden trace: 8 commits. git tests the middle
#: one first (the 4th), so that is the one that breaks the build (the 5th fixes it): it
#: is tested and must come out skipped; the seeded change comes after it. Some commits
#: touch only the README. (Each tested commit is an inner pytest session: 8 commits,
#: not more, keep the test near a minute in the guest.)
BROKEN, SEEDED, COMMITS = 4, 6, 8
README_ONLY = {3, 7}


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _write_program(repo: Path, revision: int, checksum: bool, broken: bool = False) -> None:
    text = PROGRAM.format(
        revision=revision,
        checksum=CHECKSUM if checksum else "",
        ret="retrun" if broken else "return",
    )
    (repo / "prog.bpf.c").write_text(text)


@pytest.mark.slow
def test_bisect_names_the_commit_that_changed_the_path(tmp_path: Path) -> None:
    for tool in ("git", "clang", "make"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (ci/setup installs it)")
    start = time.monotonic()
    repo = tmp_path / "prog"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("build/\n__pycache__/\n")
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "test_prog.py").write_text(TEST)
    _write_program(repo, 0, checksum=False)
    subprocess.run(["make", "-s"], cwd=repo, check=True)
    record = subprocess.run(
        [str(Path(PYTEST_LBR).parent / "pytest"), *ARGS, "--lbr-golden-update"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert record.returncode == 0, record.stdout[-3000:] + record.stderr[-2000:]
    golden = repo / "__lbr_golden__" / "test_prog" / "test_count_packets.lbr"
    assert "count_packets -> bpf_csum_diff" not in golden.read_text()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "count packets, with its golden trace")
    recorded = time.monotonic()
    good = _git(repo, "rev-parse", "HEAD")

    commits: dict[int, str] = {}
    for n in range(1, COMMITS + 1):
        if n in README_ONLY:
            (repo / "README").write_text(f"Counts packets (note {n}).\n")
        else:
            _write_program(repo, n, checksum=n >= SEEDED, broken=n == BROKEN)
        subject = {BROKEN: "tidy the return (breaks the build)", SEEDED: "checksum the header"}
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", subject.get(n, f"harmless change {n}"))
        commits[n] = _git(repo, "rev-parse", "HEAD")

    bisecting = time.monotonic()
    out = subprocess.run(
        [PYTEST_LBR, "bisect", "--here", "--good", good, "--build", "make -s", "--", *ARGS],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = out.stdout + "\n--- stderr\n" + out.stderr
    print(f"$ pytest-lbr bisect --here --good {good[:12]} --build 'make -s' -- ...\n{report}")
    done = time.monotonic()
    print(
        f"time: golden recorded in {recorded - start:.0f} s, history in "
        f"{bisecting - recorded:.0f} s, bisection in {done - bisecting:.0f} s"
    )
    assert out.returncode == 0, report
    assert f"first bad commit: {commits[SEEDED]} checksum the header" in out.stdout, report
    skipped = out.stdout.split("skipped (could not test):\n", 1)[1]
    assert skipped.startswith(
        f"  {commits[BROKEN][:12]} tidy the return (breaks the build): build failed (exit 2)"
    ), report
    steps = out.stdout.split("steps:\n", 1)[1].split("skipped (could not test):", 1)[0]
    blamed = {line.split()[1] for line in steps.splitlines() if " bad: " in line}
    assert blamed <= {commits[n][:12] for n in range(SEEDED, COMMITS + 1)}, report
    diff = out.stdout.split(f"golden diff that made {commits[SEEDED][:12]} bad", 1)[1]
    assert "+count_packets -> bpf_csum_diff" in diff, report
    # The checkout is the user's again: the branch, clean.
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert _git(repo, "rev-parse", "HEAD") == commits[COMMITS]
    assert _git(repo, "status", "--porcelain", "--untracked-files=no") == ""
