"""``gpus``: the per-GPU health record gpu-smoke keeps in a store (``report`` reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.gpu.options import ReportInputs

REPORT: Command[ReportInputs] = Command(
    name="report",
    help="Failures by node and GPU over the last days, as a Markdown table for the job summary.",
    outputs=(
        Output("failing-gpus", "How many GPUs failed at least once in the period."),
        Output("verdicts", "How many verdicts the period holds."),
    ),
    target="gpuci.gpu._health_record:report",
    options="gpuci.gpu.options:ReportInputs",
)

COMMAND: Command[None] = Command(
    name="gpus",
    help="The per-GPU health record gpu-smoke keeps: report failures by node and GPU.",
    subcommands=(REPORT,),
)
