"""``gpus``: the per-GPU health record gpu-smoke keeps in a store (``report`` reads it)."""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

REPORT = Command(
    name="report",
    help="Failures by node and GPU over the last days, as a Markdown table for the job summary.",
    inputs=(
        Input("days", "How many days back to read.", "float", "7", minimum=0),
        Input(
            "store",
            "The health store (s3://bucket/prefix or file:///dir; default: "
            "GPUCI_GPU_HEALTH_STORE).",
            "str",
        ),
    ),
    outputs=(
        Output("failing-gpus", "How many GPUs failed at least once in the period."),
        Output("verdicts", "How many verdicts the period holds."),
    ),
    target="gpuci.gpu.health_record:report",
    typed="gpuci.gpu.health_record:ReportInputs",
)

COMMAND = Command(
    name="gpus",
    help="The per-GPU health record gpu-smoke keeps: report failures by node and GPU.",
    subcommands=(REPORT,),
)
