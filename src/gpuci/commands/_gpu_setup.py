"""``gpu-setup``: query the GPUs through NVML and check them against the job's needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.gpu.options import SetupInputs

OUTPUTS = (
    Output("gpu-count", "GPUs (or MIG devices) found and usable."),
    Output("gpu-names", "Their names, comma-separated."),
    Output("memory-gb", "Total memory of the smallest usable GPU, in GB."),
    Output("cuda-version", "Highest CUDA version the driver supports."),
    Output("driver-version", "NVIDIA driver version."),
    Output("compute-capability", "Lowest compute capability among the usable GPUs."),
    Output("visible-devices", "UUIDs of the usable GPUs / MIG devices, comma-separated."),
    Output("report", "Path of the JSON report."),
)

COMMAND: Command[SetupInputs] = Command(
    name="gpu-setup",
    help="Query the GPUs through NVML and check them against the job's needs.",
    outputs=OUTPUTS,
    target="gpuci.gpu._setup.command:run",
    options="gpuci.gpu.options:SetupInputs",
    actions=("actions/gpu-setup",),
)
