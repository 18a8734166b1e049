"""The GPU commands: ``gpu-setup``, ``gpu-smoke``, and the two that act on what smoke found.

``gpus report`` reads the per-GPU health record gpu-smoke keeps in a store; ``runners release``
gives back a self-hosted runner gpu-smoke quarantined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.gpu.options import ReportInputs, SetupInputs, SmokeInputs
    from gpuci.quarantine import ReleaseInputs

SETUP: Command[SetupInputs] = Command(
    name="gpu-setup",
    help="Query the GPUs through NVML and check them against the job's needs.",
    outputs=(
        Output("gpu-count", "GPUs (or MIG devices) found and usable."),
        Output("gpu-names", "Their names, comma-separated."),
        Output("memory-gb", "Total memory of the smallest usable GPU, in GB."),
        Output("cuda-version", "Highest CUDA version the driver supports."),
        Output("driver-version", "NVIDIA driver version."),
        Output("compute-capability", "Lowest compute capability among the usable GPUs."),
        Output("visible-devices", "UUIDs of the usable GPUs / MIG devices, comma-separated."),
        Output("report", "Path of the JSON report."),
    ),
    target="gpuci.gpu._setup.command:run",
    options="gpuci.gpu.options:SetupInputs",
    actions=("actions/gpu-setup",),
)

SMOKE: Command[SmokeInputs] = Command(
    name="gpu-smoke",
    help="Smoke-test each GPU (health counters, memory, GEMM, bandwidth) within a time budget.",
    outputs=(
        Output("passed", "true when every check that ran passed, else false."),
        Output("failed-checks", "Names of the failed checks, comma-separated."),
        Output(
            "skipped-checks",
            "Names of the checks that did not run (budget, no framework, one GPU), "
            "comma-separated; empty when every check ran.",
        ),
        Output("report", "Path of the JSON report."),
        Output("seconds", "Wall time of all checks."),
    ),
    target="gpuci.gpu._smoke.command:run",
    options="gpuci.gpu.options:SmokeInputs",
    actions=("actions/gpu-smoke",),
)

HEALTH_REPORT: Command[ReportInputs] = Command(
    name="report",
    help="Failures by node and GPU over the last days, as a Markdown table for the job summary.",
    outputs=(
        Output("failing-gpus", "How many GPUs failed at least once in the period."),
        Output("verdicts", "How many verdicts the period holds."),
    ),
    target="gpuci.gpu._health_record:report",
    options="gpuci.gpu.options:ReportInputs",
)

GPUS: Command[None] = Command(
    name="gpus",
    help="The per-GPU health record gpu-smoke keeps: report failures by node and GPU.",
    subcommands=(HEALTH_REPORT,),
)

RELEASE: Command[ReleaseInputs] = Command(
    name="release",
    help="Give a quarantined runner back: restore its labels (GitHub) or unpause it (GitLab), "
    "after a passing gpu-smoke on it or with --force.",
    target="gpuci.quarantine:release",
    options="gpuci.quarantine:ReleaseInputs",
    positional="name",
)

RUNNERS: Command[None] = Command(
    name="runners",
    help="Self-hosted runners gpu-smoke took out of the pool: release one.",
    subcommands=(RELEASE,),
)
