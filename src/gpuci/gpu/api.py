"""gpu-ci's Python API for GPUs: :func:`setup` and :func:`smoke` (the commands without the CLI).

They build the commands' typed inputs (:mod:`gpuci.gpu.options`) directly and run the same
phases as ``gpu-setup`` / ``gpu-smoke``, so a Python caller (a pytest fixture, a training
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

It lives in ``gpuci.gpu.api`` rather than ``gpuci.gpu`` because ``gpuci.gpu.setup`` and
``gpuci.gpu.smoke`` are already the commands' modules: a function of that name in the package
would be replaced by the module as soon as the module is imported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.errors import CheckFailed, ExitCode, InfraError, InputError, NvmlUnavailable
from gpuci.gpu.checks import CheckOutcome
from gpuci.gpu.options import SetupInputs, SmokeInputs
from gpuci.inputs import Input
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

# The few spec rules an argument must meet (the specs themselves live in ``gpuci.commands``,
# above ``gpu``): parsed by ``Input.parse`` so the messages are the CLI's.
_VERSION = "version"
_FRAMEWORKS = ("auto", "torch", "cupy", "none")
_DCGM_LEVELS = ("0", "1", "2")


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
    result: Result  # the command's full Result (headline, report, warnings)


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
    min_gpus: int = 1,
    min_memory_gb: float | None = None,
    min_compute_capability: str | tuple[int, ...] | None = None,
    min_cuda: str | tuple[int, ...] | None = None,
    gpu_name: str | re.Pattern[str] | None = None,
    require_gpu: bool = True,
    allow_mig: bool = True,
    fail_on_ecc_errors: bool = True,
    report: str = "",
    check: bool = True,
    runtime: Runtime | None = None,
    nvml: Any = None,
) -> SetupResult:
    """Read this machine's GPUs through NVML and check them against the job's needs.

    Versions are ``"8.0"`` or ``(8, 0)``; ``gpu_name`` is a regular expression every GPU's name
    must match. Raises :class:`~gpuci.errors.InputError` (a negative count, a version or
    pattern that does not parse, an unwritable ``report``),
    :class:`~gpuci.errors.NvmlUnavailable` (an :class:`~gpuci.errors.InfraError`: no driver or
    NVML while ``require_gpu``), or :class:`~gpuci.errors.CheckFailed` (a requirement not met,
    when ``check``; its message names each failed check and the fix).
    """
    inp = SetupInputs(
        min_gpus=_number("min-gpus", min_gpus, "int"),
        min_memory_gb=None if min_memory_gb is None else _number("min-memory-gb", min_memory_gb),
        min_compute_capability=_version("min-compute-capability", min_compute_capability),
        min_cuda=_version("min-cuda", min_cuda),
        gpu_name=_pattern(gpu_name),
        require_gpu=require_gpu,
        allow_mig=allow_mig,
        fail_on_ecc_errors=fail_on_ecc_errors,
        report=report,
    )
    from gpuci.gpu import setup as command

    res = command.run(inp, runtime or Runtime(), nvml=nvml)
    _raise_for(res, check)
    out = res.outputs
    memory = out.get("memory-gb")
    return SetupResult(
        passed=res.ok,
        gpu_count=int(out.get("gpu-count") or 0),
        gpu_names=_split(out.get("gpu-names")),
        memory_gb=float(memory) if isinstance(memory, int | float) and memory else None,
        cuda_version=_text(out.get("cuda-version")),
        driver_version=_text(out.get("driver-version")),
        compute_capability=_text(out.get("compute-capability")),
        visible_devices=_split(out.get("visible-devices")),
        checks=[CheckOutcome(**c) for c in res.report.get("checks") or []],
        report=str(out.get("report") or ""),
        result=res,
    )


def smoke(
    *,
    checks: Sequence[str] = (),
    budget_seconds: float = 30.0,
    memory_fraction: float = 0.9,
    min_bandwidth_gbs: float | None = None,
    min_gemm_tflops: float | None = None,
    framework: str = "auto",
    dcgm_level: int = 0,
    report: str = "",
    check: bool = True,
    runtime: Runtime | None = None,
    nvml: Any = None,
) -> SmokeResult:
    """Smoke-test each GPU (health counters, context, GEMM, bandwidth, memory, NCCL, DCGM)
    within ``budget_seconds``; ``checks`` empty runs every check that applies.

    Raises :class:`~gpuci.errors.InputError` (an unknown check or framework, a fraction outside
    (0, 1], a DCGM level other than 0-2, no GPU given to this job, or an image that cannot start
    CUDA on a healthy node), :class:`~gpuci.errors.InfraError` (no driver or NVML, a GPU lost
    mid-run), or :class:`~gpuci.errors.CheckFailed` (a check failed, when ``check``).
    """
    inp = SmokeInputs(
        checks=list(checks),
        budget_seconds=_number("budget-seconds", budget_seconds, minimum=1),
        memory_fraction=_number("memory-fraction", memory_fraction),
        min_bandwidth_gbs=_optional("min-bandwidth-gbs", min_bandwidth_gbs),
        min_gemm_tflops=_optional("min-gemm-tflops", min_gemm_tflops),
        framework=Input("framework", "", choices=_FRAMEWORKS).parse(framework, "argument"),
        dcgm_level=Input("dcgm-level", "", "int", choices=_DCGM_LEVELS).parse(
            str(dcgm_level), "argument"
        ),
        report=report,
    )
    from gpuci.gpu.smoke import smoke as run_smoke

    res = run_smoke(inp, runtime or Runtime(), nvml=nvml)
    _raise_for(res, check)
    out = res.outputs
    return SmokeResult(
        passed=res.ok,
        failed_checks=_split(out.get("failed-checks")),
        skipped_checks=_split(out.get("skipped-checks")),
        seconds=float(out.get("seconds") or 0.0),
        checks=list(res.report.get("checks") or []),
        report=str(out.get("report") or ""),
        result=res,
    )


def _raise_for(res: Result, check: bool) -> None:
    """The command's verdict as the API's exception: input and infra always, a failed check
    when ``check``. A command that caught the error itself (to still write its report) kept
    its type and hint in ``report["error"]``."""
    if res.ok or (res.exit_code == ExitCode.CHECK_FAILED and not check):
        return
    error = res.report.get("error") or {}
    message, hint = str(error.get("message") or res.headline), error.get("hint")
    if res.exit_code == ExitCode.INFRA:
        cls = NvmlUnavailable if error.get("type") == "NvmlUnavailable" else InfraError
        raise cls(message, hint)
    if res.exit_code == ExitCode.BAD_INPUT:
        raise InputError(message, hint)
    raise CheckFailed(res.headline)


def _number(name: str, value: float, kind: str = "float", minimum: float = 0) -> Any:
    """``value`` checked as the CLI checks the input: a finite number, at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{name} is {value!r}, not a number", hint=f"pass a number as {name}")
    return Input(name, "", kind, minimum=minimum).parse(str(value), "argument")


def _optional(name: str, value: float | None) -> float | None:
    return None if value is None else float(_number(name, value))


def _version(name: str, value: str | tuple[int, ...] | None) -> tuple[int, ...] | None:
    if value is None or isinstance(value, tuple):
        return value
    parsed: tuple[int, ...] = Input(name, "", _VERSION).parse(value, "argument")
    return parsed


def _pattern(value: str | re.Pattern[str] | None) -> re.Pattern[str] | None:
    if value is None or isinstance(value, re.Pattern):
        return value
    parsed: re.Pattern[str] = Input("gpu-name", "", "regex").parse(value, "argument")
    return parsed


def _split(value: Any) -> list[str]:
    return [part for part in str(value or "").split(",") if part]


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
