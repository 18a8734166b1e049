"""Verdicts that hold on shared, real fleets: post-load read errors fail, application XIDs and
other MIG instances' events do not, on fake NVML with the codes real drivers return."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from smoke_helpers import outcome, values

from gpuci.gpu.fake_nvml import FakeNvml
from gpuci.gpu.smoke import smoke
from gpuci.runtime import Result, Runtime


def run_env(tmp: Path, fake: FakeNvml, visible: str | None = None, **over) -> Result:
    environ = {"GPUCI_JOURNAL": str(tmp / "journal.jsonl")}
    if visible is not None:
        environ["CUDA_VISIBLE_DEVICES"] = visible
    rt = Runtime(environ=environ, stdout=io.StringIO())
    return smoke(values(tmp, framework="none", **over), rt, nvml=fake)


@pytest.mark.parametrize(("code", "text"), [(16, "GPU requires restart"), (999, "Unknown Error")])
def test_a_counter_unreadable_after_the_load_fails(tmp_path: Path, code: int, text: str) -> None:
    result = run_env(tmp_path, FakeNvml.from_spec(f"h100-sxm:readerr={code}"))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "fail", health
    assert "readable before the load, unreadable after it" in health["reason"]
    assert text in health["reason"]
    assert result.exit_code == 1


def test_a_counter_never_supported_still_passes(tmp_path: Path) -> None:
    fake = FakeNvml(["t4"])
    fake.set(0, pcie_replay=None)  # unsupported before and after: not a finding
    assert outcome(run_env(tmp_path, fake), "gpu0:health")["status"] == "pass"


@pytest.mark.parametrize("xid", [13, 31, 43, 45])
def test_application_xids_are_reported_not_failed(tmp_path: Path, xid: int) -> None:
    result = run_env(tmp_path, FakeNvml.from_spec(f"h100-sxm:xid={xid}"))
    health = outcome(result, "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["application_xids"] == [xid]
    assert health["figures"]["xids"] == []


def test_a_hardware_xid_next_to_an_application_one_fails(tmp_path: Path) -> None:
    fake = FakeNvml(["h100-sxm"])
    fake.inject_xid(0, 31)
    fake.inject_xid(0, 48)  # double-bit ECC error
    health = outcome(run_env(tmp_path, fake), "gpu0:health")
    assert health["status"] == "fail" and health["reason"] == "XID 48 raised during the run"


def test_an_xid_from_another_mig_instance_is_not_this_slices(tmp_path: Path) -> None:
    fake = FakeNvml(["a100-mig"])
    first = fake.devices[0].migs[0]  # GPU instance 1
    fake.inject_xid(0, 79, gpu_instance_id=2)  # the other tenant's slice
    health = outcome(run_env(tmp_path, fake, first.uuid), "gpu0:health")
    assert health["status"] == "pass", health
    assert health["figures"]["other_instance_xids"] == [79]


def test_an_xid_from_the_slice_under_test_fails(tmp_path: Path) -> None:
    fake = FakeNvml(["a100-mig"])
    fake.inject_xid(0, 79, gpu_instance_id=1)
    result = run_env(tmp_path, fake, fake.devices[0].migs[0].uuid)
    assert outcome(result, "gpu0:health")["status"] == "fail"
