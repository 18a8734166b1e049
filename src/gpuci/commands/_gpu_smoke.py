"""``gpu-smoke``: catch a bad GPU node in seconds, before the expensive job starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.gpu.options import SmokeInputs

COMMAND: Command[SmokeInputs] = Command(
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
