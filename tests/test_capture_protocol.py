"""The capture protocol on the host: the registry names every backend once, each
says what it can do without arming, and callers decide from that."""

from __future__ import annotations

import os

import pytest

from pytest_lbr import capture
from pytest_lbr.capture import (
    BACKENDS,
    REGISTRY,
    Capabilities,
    CaptureError,
    Scope,
    backend_class,
    open_capture,
)
from pytest_lbr.capture.base import LIVE_OWN_PROCESS
from pytest_lbr.live import LiveTrace, without_return_values
from pytest_lbr.targets import parse_targets


def test_the_registry_is_the_list_of_backends() -> None:
    assert BACKENDS == ("auto", *REGISTRY)
    for name in REGISTRY:
        cls = backend_class(name)
        assert cls.name == name
        assert isinstance(cls.capabilities, Capabilities)
    with pytest.raises(ValueError, match="unknown backend 'fast'; expected one of auto, lbr"):
        backend_class("fast")
    assert not capture.probe("fast").available


def test_every_backend_records_every_scope() -> None:
    for name in REGISTRY:
        caps = backend_class(name).capabilities
        assert caps.lacks(Scope.of("children")) == []
        assert caps.lacks(Scope.of("process", pid=os.getpid())) == []
        assert caps.lacks(Scope.of("children", pid=os.getpid())) == []


def test_the_software_pmu_is_the_lbr_backend_without_branches() -> None:
    soft = backend_class("lbr", "software")
    assert soft.name == "lbr"
    assert not soft.capabilities.branches
    assert soft.capabilities.scopes == backend_class("lbr").capabilities.scopes
    assert "no branches" in soft.capabilities.why("branches")
    with pytest.raises(ValueError, match=r"the graph backend does not run on --lbr-pmu=software"):
        backend_class("graph", "software")
    assert not capture.probe("graph", "software").available
    with pytest.raises(ValueError, match="unknown PMU 'fpga'"):
        open_capture("lbr", [], pmu="fpga")


@pytest.mark.parametrize("backend", list(REGISTRY))
def test_a_live_capture_of_this_process_is_refused_by_every_backend(backend: str) -> None:
    driver = backend_class(backend)()
    try:
        with pytest.raises(CaptureError) as err:
            driver.open(parse_targets(["kfunc:vfs_write"]), scope=Scope(), live=True)
        assert str(err.value) == LIVE_OWN_PROCESS
    finally:
        driver.close()


def test_which_targets_carry_a_return_value_comes_from_the_capabilities() -> None:
    targets = parse_targets(["kfunc:vfs_write", "kfunc:vfs_*", "tp:syscalls/sys_enter_getpid"])
    silent = {
        name: [t.spec for t in without_return_values(targets, backend_class(name).capabilities)]
        for name in REGISTRY
    }
    assert silent == {
        "lbr": ["tp:syscalls/sys_enter_getpid"],
        "graph": ["kfunc:vfs_*", "tp:syscalls/sys_enter_getpid"],
    }


def test_every_backend_streams_so_none_is_refused_by_name() -> None:
    for name in REGISTRY:
        live = LiveTrace(["kfunc:vfs_write"], backend=name)
        assert live.backend_name == name and live.capabilities.live
