"""Shared steps of conformance tests of tracing and LSM programs: kfuncs Linux 6.1
lacks, and whether the bpf LSM is active."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_lbr.bpf import BpfLoader, BpfLoadError, BpfObject


def load_kfunc_object(bpf: BpfLoader, path: Path) -> BpfObject:
    """`bpf.load(path)` of an object whose programs call kfuncs a later kernel added:
    on a 6.1 kernel, whose BTF lacks them, libbpf refuses the object and the test
    skips with libbpf's words (`extern (func ksym) 'bpf_iter_num_new': not found in
    kernel or module BTFs`), as test_tp_btf.py's kfunc test does; any other refusal,
    or one on a later kernel, fails."""
    try:
        return bpf.load(path)
    except BpfLoadError as exc:
        missing = [line for line in exc.log.splitlines() if "not found in kernel" in line]
        if missing and os.uname().release.startswith("6.1."):
            pytest.skip(f"{os.uname().release}: {missing[0].strip()}")
        raise


#: Where the kernel lists its active LSMs (`CONFIG_LSM`, or the `lsm=` boot parameter).
LSM_LIST = Path("/sys/kernel/security/lsm")


def bpf_lsm_or_skip() -> None:
    """Skip, saying why, unless the bpf LSM is active (a kernel started without it runs
    no LSM program: `pytest-lbr vm --append lsm=...,bpf`); the test marks allow_skip."""
    active = LSM_LIST.read_text().strip() if LSM_LIST.exists() else "(no such file)"
    if "bpf" not in active.split(","):
        pytest.skip(f"the bpf LSM is not active: {LSM_LIST} lists {active!r}")
