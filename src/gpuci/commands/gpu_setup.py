"""``gpu-setup``: query the GPUs through NVML and check them against the job's needs."""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

INPUTS = (
    Input(
        "min-gpus",
        "Fewest GPUs (or MIG devices, with allow-mig) the job needs.",
        "int",
        "1",
        minimum=0,
    ),
    Input("min-memory-gb", "Least total memory per GPU, in GB (10^9 bytes).", "float", minimum=0),
    Input("min-compute-capability", "Lowest CUDA compute capability, e.g. 8.0.", "version"),
    Input("min-cuda", "Lowest CUDA version the driver must support, e.g. 12.4.", "version"),
    Input(
        "gpu-name",
        "Regular expression every used GPU's name must match, e.g. 'H100|H200'.",
        "regex",
    ),
    Input(
        "require-gpu",
        "Fail when no GPU or no driver is found; false gives a CPU-only report.",
        "bool",
        "true",
    ),
    Input(
        "allow-mig",
        "Count MIG devices as GPUs and list their UUIDs in visible-devices.",
        "bool",
        "true",
    ),
    Input(
        "fail-on-ecc-errors",
        "Fail on volatile uncorrected ECC errors, pending page retirement or row remapping, "
        "or a failed remap; false only warns.",
        "bool",
        "true",
    ),
    Input("export-visible-devices", "Set CUDA_VISIBLE_DEVICES for later steps.", "bool", "false"),
    Input(
        "report",
        "Where to write the JSON report (default: gpuci-gpu-report.json in "
        "RUNNER_TEMP or the current folder).",
        "str",
    ),
)

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

COMMAND = Command(
    name="gpu-setup",
    help="Query the GPUs through NVML and check them against the job's needs.",
    inputs=INPUTS,
    outputs=OUTPUTS,
    target="gpuci.gpu.setup:run",
    typed="gpuci.gpu.options:SetupInputs",
    actions=("actions/gpu-setup",),
)
