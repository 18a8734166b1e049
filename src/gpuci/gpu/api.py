"""gpu-ci's Python API for GPUs: :func:`setup` and :func:`smoke` (the commands without the CLI).

They build the commands' typed inputs (:mod:`gpuci.gpu.options`) directly and call the
operations the commands render (:func:`gpuci.gpu._setup.operation.setup`,
:func:`gpuci.gpu._smoke.examine`), so a Python caller (a pytest fixture, a training
script's first lines) gets the same NVML reads and verdicts, with typed results::

    from gpuci.gpu.api import setup, smoke
    gpus = setup(min_gpus=2, min_memory_gb=80, min_cuda="12.4")
    print(gpus.gpu_names, gpus.visible_devices)
    smoke(checks=["health", "gemm"], budget_seconds=20)

Errors are raised: :class:`gpuci.errors.InputError` for a bad argument (exit 2 in the CLI),
:class:`gpuci.errors.CheckFailed` when a requirement or smoke check fails and ``check`` is true
(exit 1), :class:`gpuci.errors.InfraError` (:class:`~gpuci.errors.NvmlUnavailable`: no driver,
no NVML, a GPU fallen off the bus) when the machine cannot be read (exit 3). With
``check=False`` a failed check is returned (``passed`` False) instead of raised.

NVML comes from ``runtime.environ`` (``GPUCI_FAKE_NVML`` selects the recorded fake, see
:mod:`gpuci.gpu.fake.nvml`) unless ``nvml`` passes an NVML object. The API does not export
``CUDA_VISIBLE_DEVICES``, write a health record or quarantine a runner: those are the actions'
jobs; ``SetupResult.visible_devices`` is there to export.

It lives in ``gpuci.gpu.api`` rather than ``gpuci.gpu`` so that importing ``gpuci.gpu`` loads
nothing (``python -m gpuci --help`` must not load NVML).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.errors import CheckFailed, InputError
from gpuci.gpu._checks import CheckOutcome
from gpuci.gpu.options import SetupInputs, SmokeInputs
from gpuci.inputs import Input, checked
from gpuci.runtime import Result, Runtime

__all__ = [
    "CheckOutcome",
    "SetupInputs",
    "SetupResult",
    "SmokeInputs",
    "SmokeResult",
    "setup",
    "smoke",
]

# The keywords' defaults are the inputs' (gpuci.inputs.inp), and the arguments are held to the
# inputs' rules by gpuci.inputs.checked, so the messages are the CLI's.
_SETUP = SetupInputs()
_SMOKE = SmokeInputs()


@dataclass(frozen=True)
class SetupResult:
    """What gpu-setup found: the devices one CUDA process sees, and every check's outcome."""

    passed: bool
    gpu_count: int
    gpu_names: list[str]
    memory_gb: float | None  # total memory of the smallest usable GPU
    cuda_version: str | None  # highest CUDA the driver supports
    driver_version: str | None
    compute_capability: str | None  # lowest among the usable GPUs
    visible_devices: list[str]  # UUIDs, for CUDA_VISIBLE_DEVICES
    checks: list[CheckOutcome]
    report: str  # path of the JSON report
    result: Result  # the step's Result, as the CLI would report it (headline, report, warnings)


@dataclass(frozen=True)
class SmokeResult:
    """What gpu-smoke did: labels such as ``gpu0:gemm`` or ``nccl``, per-check records."""

    passed: bool
    failed_checks: list[str]
    skipped_checks: list[str]
    seconds: float
    checks: list[dict[str, Any]]  # name, gpu, status, reason, seconds, figures
    report: str  # path of the JSON report
    result: Result


def setup(
    *,
    min_gpus: int = _SETUP.min_gpus,
    min_memory_gb: float | None = _SETUP.min_memory_gb,
    min_compute_capability: str | tuple[int, ...] | None = None,
    min_cuda: str | tuple[int, ...] | None = None,
    gpu_name: str | re.Pattern[str] | None = None,
    require_gpu: bool = _SETUP.require_gpu,
    allow_mig: bool = _SETUP.allow_mig,
    fail_on_ecc_errors: bool = _SETUP.fail_on_ecc_errors,
    report: str = _SETUP.report,
    check: bool = True,
    runtime: Runtime | None = None,
    nvml: Any = None,
) -> SetupResult:
    """Read this machine's GPUs through NVML and check them against the job's needs.

    Args:
        min_gpus: the fewest GPUs (or MIG devices, with ``allow_mig``) the job needs.
        min_memory_gb: the least total memory per GPU, in GB (10^9 bytes); None: unchecked.
        min_compute_capability: the lowest compute capability, ``"8.0"`` or ``(8, 0)``.
        min_cuda: the lowest CUDA version the driver must support, ``"12.4"`` or ``(12, 4)``.
        gpu_name: a regular expression every usable GPU's name must match.
        require_gpu: fail when there is no GPU or NVML, rather than report none.
        allow_mig: count MIG devices as GPUs.
        fail_on_ecc_errors: fail on uncorrected ECC errors.
        report: where to write the JSON report; empty: gpuci-gpu-report.json in RUNNER_TEMP
            or the current folder.
        check: raise :class:`~gpuci.errors.CheckFailed` when a requirement is not met;
            False returns it (``passed`` False).
        runtime: the environment, output streams and masks; default: this process's.
        nvml: an NVML object to read instead of the driver's (tests, recorded machines).

    Returns:
        The devices one CUDA process sees and every check's outcome.

    Raises:
        InputError: a negative count, a version or pattern that does not parse, an
            argument of the wrong type, or an unwritable ``report``.
        NvmlUnavailable: no driver or NVML while ``require_gpu`` (an
            :class:`~gpuci.errors.InfraError`).
        CheckFailed: a requirement not met, when ``check``; its message names each failed
            check and the fix.
    """
    inp = SetupInputs(
        min_gpus=min_gpus,
        min_memory_gb=min_memory_gb,
        min_compute_capability=_parsed("min_compute_capability", min_compute_capability),
        min_cuda=_parsed("min_cuda", min_cuda),
        gpu_name=_parsed("gpu_name", gpu_name),
        require_gpu=require_gpu,
        allow_mig=allow_mig,
        fail_on_ecc_errors=fail_on_ecc_errors,
        report=report,
    )
    from gpuci.gpu._setup.operation import setup as read_and_judge  # loaded by the first setup
    from gpuci.gpu._setup.report import render

    done = read_and_judge(checked(inp), runtime or Runtime(), nvml=nvml)
    result = render(done)
    if check and not done.passed:
        raise CheckFailed(result.headline)
    snapshot = done.snapshot
    return SetupResult(
        passed=done.passed,
        gpu_count=len(done.units),
        gpu_names=[u.name for u in done.units],
        memory_gb=done.memory_gb or None,
        cuda_version=(snapshot.cuda_text or None) if snapshot else None,
        driver_version=(snapshot.driver_version or None) if snapshot else None,
        compute_capability=done.compute_capability,
        visible_devices=[u.uuid for u in done.units],
        checks=done.checks,
        report=str(done.path or ""),
        result=result,
    )


def smoke(
    *,
    checks: Sequence[str] = (),
    budget_seconds: float = _SMOKE.budget_seconds,
    memory_fraction: float = _SMOKE.memory_fraction,
    min_bandwidth_gbs: float | None = _SMOKE.min_bandwidth_gbs,
    min_gemm_tflops: float | None = _SMOKE.min_gemm_tflops,
    framework: str = _SMOKE.framework,
    dcgm_level: int = _SMOKE.dcgm_level,
    report: str = _SMOKE.report,
    check: bool = True,
    runtime: Runtime | None = None,
    nvml: Any = None,
) -> SmokeResult:
    """Smoke-test each GPU (health counters, context, GEMM, bandwidth, memory, NCCL, DCGM).

    Args:
        checks: the checks to run; empty: every check that applies.
        budget_seconds: the time all checks share, at least 1.
        memory_fraction: the fraction of free GPU memory the memory test fills.
        min_bandwidth_gbs: the least memory bandwidth, GB/s; None: the GPU model's minimum.
        min_gemm_tflops: the least GEMM throughput, TFLOP/s; None: the GPU model's minimum.
        framework: the load generator: ``auto``, ``torch``, ``cupy`` or ``none``.
        dcgm_level: the DCGM diagnostic level, 0 (none) to 2.
        report: where to write the JSON report; empty: the default name in RUNNER_TEMP or the
            current folder.
        check: raise :class:`~gpuci.errors.CheckFailed` when a check fails; False returns it
            (``passed`` False).
        runtime: the environment, output streams and masks; default: this process's.
        nvml: an NVML object to read instead of the driver's (tests, recorded machines).

    Returns:
        Which checks passed, failed and were skipped, with each one's record.

    Raises:
        InputError: an unknown check or framework, a number out of range or of the wrong
            type, a DCGM level other than 0-2, no GPU given to this job, or an image that
            cannot start CUDA on a healthy node.
        InfraError: no driver or NVML, or a GPU lost mid-run.
        CheckFailed: a check failed, when ``check``.
    """
    inp = SmokeInputs(
        checks=list(checks),
        budget_seconds=budget_seconds,
        memory_fraction=memory_fraction,
        min_bandwidth_gbs=min_bandwidth_gbs,
        min_gemm_tflops=min_gemm_tflops,
        framework=framework,
        dcgm_level=dcgm_level,
        report=report,
    )
    from gpuci.gpu._smoke import Plan, examine, render, render_plan  # loaded by the first smoke

    done = examine(checked(inp), runtime or Runtime(), nvml=nvml)
    if isinstance(done, Plan):  # a dry run: nothing ran, nothing was written
        return SmokeResult(
            passed=bool(done.gpus),
            failed_checks=[],
            skipped_checks=done.skipped,
            seconds=0.0,
            checks=[],
            report="",
            result=render_plan(done),
        )
    result = render(done)
    if done.environment:  # the image cannot start CUDA on a node NVML finds healthy
        raise InputError(result.headline)
    if done.failed and check:
        raise CheckFailed(result.headline)
    return SmokeResult(
        passed=not done.failed,
        failed_checks=[o.label for o in done.failed],
        skipped_checks=[o.label for o in done.skipped],
        seconds=done.seconds,
        checks=done.report["checks"],
        report=str(done.path),
        result=result,
    )


def _parsed(name: str, value: Any) -> Any:
    """A version or pattern given as text, parsed by its input as the CLI parses it."""
    if not isinstance(value, str):
        return value
    spec: Input = SetupInputs.__dataclass_fields__[name].metadata["input"]
    return spec.parse(value, "argument")
