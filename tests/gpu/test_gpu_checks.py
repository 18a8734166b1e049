"""Verdicts of each requirement against the fake profiles, through the reusable evaluate()."""

from __future__ import annotations

import re

import pytest

from gpuci.gpu._checks import Requirements, evaluate, usable_units
from gpuci.gpu._nvml import Snapshot, open_nvml
from gpuci.gpu.fake.nvml import FakeNvml


def snap(*profiles: str, fake: FakeNvml | None = None) -> Snapshot:
    with open_nvml({}, fake or FakeNvml(list(profiles))) as session:
        return session.snapshot()


def outcome(checks: list, name: str) -> tuple[str, str]:
    (check,) = [c for c in checks if c.check == name]
    return check.outcome, check.reason


def judged(req: Requirements, snapshot: Snapshot | None, name: str) -> tuple[str, str]:
    """The verdict and reason of check ``name`` when ``req`` is held against ``snapshot``."""
    return outcome(evaluate(req, snapshot), name)


@pytest.mark.parametrize(
    ("profile", "verdict"),
    [("h200", "pass"), ("h100-sxm", "fail"), ("a100-mig", "fail"), ("l4", "fail")],
)
def test_min_memory_100_gb(profile: str, verdict: str) -> None:
    checks = evaluate(Requirements(min_memory_gb=100), snap(profile))
    assert outcome(checks, "min-memory-gb")[0] == verdict


def test_memory_reason_names_the_gpu_and_size() -> None:
    _, reason = judged(Requirements(min_memory_gb=100), snap("a100-mig"), "min-memory-gb")
    assert reason.startswith("GPU 0/MIG 0 'NVIDIA A100-SXM4-40GB MIG 3g.20gb' has 20.9 GB")
    _, reason = judged(Requirements(min_memory_gb=80), snap("h100-sxm"), "min-memory-gb")
    assert reason == "lowest: GPU 0 'NVIDIA H100 80GB HBM3' has 85.5 GB"


def test_min_memory_judges_the_whole_a100_without_mig() -> None:
    checks = evaluate(Requirements(min_memory_gb=40, allow_mig=False), snap("h200"))
    assert outcome(checks, "min-memory-gb")[0] == "pass"
    fake = FakeNvml(["a100-mig"])
    fake.set(0, mig=[])  # MIG off: the whole 40 GB board is one device
    assert judged(Requirements(min_memory_gb=40), snap(fake=fake), "min-memory-gb")[0] == "pass"


def test_min_cuda_against_the_driver() -> None:
    assert judged(Requirements(min_cuda=(12, 4)), snap("h200"), "min-cuda")[0] == "pass"
    verdict, reason = judged(Requirements(min_cuda=(12, 4)), snap("old-driver"), "min-cuda")
    assert verdict == "fail"
    assert reason == "driver 470.57.02 supports CUDA up to 11.4; upgrade the driver"


def test_min_compute_capability() -> None:
    req = Requirements(min_compute_capability=(8, 0))
    assert judged(req, snap("l4"), "min-compute-capability")[0] == "pass"
    verdict, reason = judged(req, snap("h100-sxm", "t4"), "min-compute-capability")
    assert verdict == "fail" and reason == "GPU 1 'Tesla T4' has compute capability 7.5"
    req9 = Requirements(min_compute_capability=(9,))
    assert judged(req9, snap("h200"), "min-compute-capability")[0] == "pass"


def test_gpu_name_regex() -> None:
    req = Requirements(gpu_name=re.compile("H100|H200"))
    assert judged(req, snap("h200", "h100-sxm"), "gpu-name")[0] == "pass"
    assert judged(req, snap("h200", "h100-sxm"), "gpu-name")[1] == (
        "all match: NVIDIA H100 80GB HBM3, NVIDIA H200"
    )
    assert judged(req, snap("h200", "l4"), "gpu-name") == (
        "fail",
        "GPU 1 'NVIDIA L4': name does not match",
    )


def test_min_gpus_counts_mig_devices_only_when_allowed() -> None:
    a100 = snap("a100-mig")
    # two MIG devices, but CUDA shows one MIG device per process: one counts
    assert judged(Requirements(min_gpus=2), a100, "min-gpus") == (
        "fail",
        "1 GPU(s)/MIG device(s) one CUDA process can use (1 more MIG device(s) need a process "
        "each: CUDA shows one MIG device per process)",
    )
    assert judged(Requirements(min_gpus=1), a100, "min-gpus")[0] == "pass"
    assert "CUDA shows one MIG device per process" in judged(Requirements(), a100, "allow-mig")[1]
    checks = evaluate(Requirements(min_gpus=1, allow_mig=False), a100)
    assert outcome(checks, "allow-mig")[0] == "fail"
    assert outcome(checks, "min-gpus") == ("fail", "0 usable GPU(s) found")
    assert usable_units(a100, allow_mig=False) == []
    assert judged(Requirements(min_gpus=3), snap("h100-sxm", "h100-sxm"), "min-gpus")[0] == "fail"


def test_ecc_errors_fail_only_when_asked() -> None:
    bad = snap("ecc-bad")
    verdict, reason = judged(Requirements(), bad, "fail-on-ecc-errors")
    assert verdict == "fail"
    assert reason == (
        "GPU 0: 2 volatile uncorrected ECC errors, row remapping pending (reset the GPU)"
    )
    verdict, reason = judged(Requirements(fail_on_ecc_errors=False), bad, "fail-on-ecc-errors")
    assert verdict == "pass" and "not failing" in reason
    assert judged(Requirements(), snap("h200"), "fail-on-ecc-errors")[0] == "pass"


def test_unsupported_counters_never_fail() -> None:
    fake = FakeNvml(["t4"])
    fake.set(
        0,
        ecc_enabled=None,
        ecc_volatile_uncorrected=None,
        retired_pages_pending=None,
        remapped_rows=None,
        pcie_replay=None,
        clock_events=None,
        temperature_c=None,
        power_limit_mw=None,
        pcie_gen=None,
    )
    checks = evaluate(
        Requirements(min_memory_gb=10, min_compute_capability=(7, 0)), snap(fake=fake)
    )
    assert outcome(checks, "fail-on-ecc-errors")[0] == "unsupported"
    assert [c.outcome for c in checks if c.outcome == "fail"] == []


def test_no_gpu_without_requirement_is_cpu_only_and_with_it_lists_what_lacks() -> None:
    none = snap()
    assert [(c.check, c.outcome) for c in evaluate(Requirements(require_gpu=False), none)] == [
        ("require-gpu", "pass")
    ]
    checks = evaluate(Requirements(min_memory_gb=40, min_cuda=(12, 0)), None)
    assert {c.check: c.outcome for c in checks} == {
        "require-gpu": "fail",
        "allow-mig": "pass",
        "min-gpus": "fail",
        "min-memory-gb": "fail",
        "min-cuda": "fail",
    }
