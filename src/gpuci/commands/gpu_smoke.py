"""``gpu-smoke``: catch a bad GPU node in seconds, before the expensive job starts."""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

INPUTS = (
    Input(
        "checks",
        "Checks to run, comma or newline separated, from: health, context, gemm, membw, pcie, "
        "memory, nccl, dcgm; default: all that apply.",
        "list",
    ),
    Input(
        "budget-seconds",
        "Time budget for all checks; checks that would overrun are skipped and reported.",
        "float",
        "30",
        minimum=1,
    ),
    Input(
        "memory-fraction",
        "Fraction of free GPU memory the memory test fills.",
        "float",
        "0.9",
        minimum=0,
    ),
    Input(
        "min-bandwidth-gbs",
        "Least device memory bandwidth in GB/s (default: 80% of a published measured "
        "figure per model; models without one are reported, not judged, unless this is set).",
        "float",
        minimum=0,
    ),
    Input(
        "min-gemm-tflops",
        "Least FP16 GEMM throughput in TFLOP/s (default: 70% of a published measured "
        "sustained figure per model; models without one, such as L4, A10 and L40S, are "
        "reported, not judged, unless this is set).",
        "float",
        minimum=0,
    ),
    Input(
        "min-busbw-gbs",
        "Least all-reduce bus bandwidth in GB/s (nccl-tests' busbw; default: a measured "
        "figure per interconnect, else reported, not judged).",
        "float",
        minimum=0,
    ),
    Input(
        "max-throttle-percent",
        "Share of the run (at least 1 s) a thermal or power-brake slowdown may hold the clocks "
        "down, by NVML's cumulative counters, before the GPU fails.",
        "float",
        "10",
        minimum=0,
    ),
    Input("framework", "Load generator.", "str", "auto", choices=("auto", "torch", "cupy", "none")),
    Input(
        "dcgm-level",
        "Run dcgmi diag at this level when present (0 = off).",
        "int",
        "0",
        choices=("0", "1", "2"),
    ),
    Input(
        "report",
        "Where to write the JSON report (default: gpuci-smoke-report.json in RUNNER_TEMP or the "
        "current folder).",
        "str",
    ),
    Input(
        "on-failure",
        "On a hardware failure: fail the job, or also take this self-hosted runner out of the "
        "pool (GitHub: remove quarantine-labels; GitLab: pause it; docs/quarantine.md).",
        "str",
        "fail",
        choices=("fail", "quarantine"),
    ),
    Input(
        "health-store",
        "Store for the per-GPU health record (s3://bucket/prefix or file:///dir; default: "
        "GPUCI_GPU_HEALTH_STORE; empty: no record). A failed write is a warning.",
        "str",
    ),
    Input(
        "quarantine-labels", "Runner labels quarantine removes (GitHub), e.g. gpu-large.", "list"
    ),
)

COMMAND = Command(
    name="gpu-smoke",
    help="Smoke-test each GPU (health counters, memory, GEMM, bandwidth) within a time budget.",
    inputs=INPUTS,
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
    target="gpuci.gpu.smoke.command:run",
    typed="gpuci.gpu.options:SmokeInputs",
    actions=("actions/gpu-smoke",),
)
