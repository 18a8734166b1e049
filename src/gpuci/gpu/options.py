"""The typed inputs of gpu-setup, gpu-smoke and ``gpus report``: one frozen dataclass each.

Each field declares one input (:func:`gpuci.inputs.inp`); the commands' flags, ``INPUT_*`` and
actions are read from these classes, and the Python API (:mod:`gpuci.gpu.api`) builds them
directly.
"""

from __future__ import annotations

import re

from gpuci.inputs import inp, options

__all__ = ["ReportInputs", "Requirements", "SetupInputs", "SmokeChecks", "SmokeInputs"]

# A day: far past any smoke (DCGM level 2 takes minutes), and a deadline the OS can wait on
# (1e30 seconds overflowed select() inside the dcgm check).
MAX_BUDGET_S = 86400


@options
class Requirements:
    """The job's needs, as gpu-setup judges them. None: that requirement is not checked."""

    min_gpus: int = inp(
        "Fewest GPUs (or MIG devices, with allow-mig) the job needs.", default="1", minimum=0
    )
    min_memory_gb: float | None = inp("Least total memory per GPU, in GB (10^9 bytes).", minimum=0)
    min_compute_capability: tuple[int, ...] | None = inp(
        "Lowest CUDA compute capability, e.g. 8.0."
    )
    min_cuda: tuple[int, ...] | None = inp(
        "Lowest CUDA version the driver must support, e.g. 12.4."
    )
    gpu_name: re.Pattern[str] | None = inp(
        "Regular expression every used GPU's name must match, e.g. 'H100|H200'."
    )
    require_gpu: bool = inp(
        "Fail when no GPU or no driver is found; false gives a CPU-only report.", default="true"
    )
    allow_mig: bool = inp(
        "Count MIG devices as GPUs and list their UUIDs in visible-devices.", default="true"
    )
    fail_on_ecc_errors: bool = inp(
        "Fail on volatile uncorrected ECC errors, pending page retirement or row remapping, "
        "or a failed remap; false only warns.",
        default="true",
    )


@options
class SetupInputs(Requirements):
    """What ``gpu-setup`` is given: the requirements, and where to report and what to export."""

    export_visible_devices: bool = inp("Set CUDA_VISIBLE_DEVICES for later steps.", default="false")
    report: str = inp(
        "Where to write the JSON report (default: gpuci-gpu-report.json in RUNNER_TEMP or the"
        " current folder)."
    )


@options
class SmokeChecks:
    """Which smoke checks run and their minimums (None: the per-model minimum applies): what
    ``gpu-smoke`` and ``runners release`` (which smokes before it gives a runner back) share."""

    checks: list[str] = inp(
        "Checks to run, comma or newline separated, from: health, context, gemm, membw, pcie,"
        " memory, nccl, dcgm; default: all that apply."
    )
    budget_seconds: float = inp(
        ("Time budget for all checks; checks that would overrun are skipped and reported."),
        default="30",
        minimum=1,
        maximum=MAX_BUDGET_S,
    )
    memory_fraction: float = inp(
        "Fraction of free GPU memory the memory test fills.", default="0.9", minimum=0
    )
    min_bandwidth_gbs: float | None = inp(
        "Least device memory bandwidth in GB/s (default: 80% of a published measured figure "
        "per model; models without one are reported, not judged, unless this is set).",
        minimum=0,
    )
    min_gemm_tflops: float | None = inp(
        "Least FP16 GEMM throughput in TFLOP/s (default: 70% of a published measured "
        "sustained figure per model; models without one, such as L4, A10 and L40S, are "
        "reported, not judged, unless this is set).",
        minimum=0,
    )
    min_busbw_gbs: float | None = inp(
        "Least all-reduce bus bandwidth in GB/s (nccl-tests' busbw; default: a measured "
        "figure per interconnect, else reported, not judged).",
        minimum=0,
    )
    max_throttle_percent: float = inp(
        "Share of the run (at least 1 s) a thermal or power-brake slowdown may hold the "
        "clocks down, by NVML's cumulative counters, before the GPU fails.",
        default="10",
        minimum=0,
        maximum=100,
    )
    framework: str = inp(
        "Load generator.", default="auto", choices=("auto", "torch", "cupy", "none")
    )
    dcgm_level: int = inp(
        "Run dcgmi diag at this level when present (0 = off).", default="0", choices=("0", "1", "2")
    )
    report: str = inp(
        "Where to write the JSON report (default: gpuci-smoke-report.json in RUNNER_TEMP or "
        "the current folder)."
    )


@options
class SmokeInputs(SmokeChecks):
    """What ``gpu-smoke`` is given: the checks, and what to do with a failing verdict."""

    on_failure: str = inp(
        "On a hardware failure: fail the job, or also take this self-hosted runner out of the"
        " pool (GitHub: remove quarantine-labels; GitLab: pause it; docs/quarantine.md).",
        default="fail",
        choices=("fail", "quarantine"),
    )
    health_store: str = inp(
        "Store for the per-GPU health record (s3://bucket/prefix or file:///dir; default: "
        "GPUCI_GPU_HEALTH_STORE; empty: no record). A failed write is a warning."
    )
    quarantine_labels: list[str] = inp("Runner labels quarantine removes (GitHub), e.g. gpu-large.")


@options
class ReportInputs:
    """What ``gpus report`` is given."""

    days: float = inp("How many days back to read.", default="7", minimum=0)
    store: str = inp(
        "The health store (s3://bucket/prefix or file:///dir; default: GPUCI_GPU_HEALTH_STORE)."
    )
