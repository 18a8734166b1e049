"""The typed inputs of ``gpu-setup`` and ``gpu-smoke``: one frozen dataclass each.

Field names are the inputs' names in snake_case and their types follow the specs in
:mod:`gpuci.commands.gpu_setup` and :mod:`gpuci.commands.gpu_smoke` (``tests/test_typed.py``
checks they stay in step; they live here because ``gpu`` may not import ``commands``). The CLI,
``INPUT_*`` and the dry run resolve the specs, then :func:`gpuci.typed.typed` builds one of
these; the Python API (:mod:`gpuci.gpu.api`) builds them directly. Defaults match the specs'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Requirements", "SetupInputs", "SmokeChecks", "SmokeInputs"]


@dataclass(frozen=True)
class Requirements:
    """The job's needs, as gpu-setup judges them. None: that requirement is not checked."""

    min_gpus: int = 1
    min_memory_gb: float | None = None
    min_compute_capability: tuple[int, ...] | None = None
    min_cuda: tuple[int, ...] | None = None
    gpu_name: re.Pattern[str] | None = None
    require_gpu: bool = True
    allow_mig: bool = True
    fail_on_ecc_errors: bool = True


@dataclass(frozen=True)
class SetupInputs(Requirements):
    """What ``gpu-setup`` is given: the requirements, and where to report and what to export."""

    export_visible_devices: bool = False
    report: str = ""  # "": gpuci-gpu-report.json in RUNNER_TEMP or the current folder


@dataclass(frozen=True)
class SmokeChecks:
    """Which smoke checks run and their minimums (None: the per-model minimum applies): what
    ``gpu-smoke`` and ``runners release`` (which smokes before it gives a runner back) share."""

    checks: list[str] = field(default_factory=list)  # []: every check that applies
    budget_seconds: float = 30.0
    memory_fraction: float = 0.9
    min_bandwidth_gbs: float | None = None
    min_gemm_tflops: float | None = None
    min_busbw_gbs: float | None = None
    max_throttle_percent: float = 10.0
    framework: str = "auto"
    dcgm_level: int = 0
    report: str = ""  # "": gpuci-smoke-report.json in RUNNER_TEMP or the current folder


@dataclass(frozen=True)
class SmokeInputs(SmokeChecks):
    """What ``gpu-smoke`` is given: the checks, and what to do with a failing verdict."""

    on_failure: str = "fail"
    health_store: str = ""
    quarantine_labels: list[str] = field(default_factory=list)
