"""``gate``, ``provenance``, ``report``: training in CI, a metric gate, provenance, the PR report.

The ``actions/metric-gate`` action runs ``gate``, which also writes the provenance when
``artifacts`` is given and posts the report when ``comment`` is true, so one step does all three
and the dry run plans all three. ``provenance`` and ``report`` run alone from any shell or CI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.training.options import GateInputs, ProvenanceInputs, ReportInputs

PROVENANCE_OUTPUTS = (
    Output("record", "Path of provenance.json, the plain record."),
    Output("statement", "Path of the in-toto Statement v1 (SLSA provenance v1 predicate)."),
    Output("predicate", "Path of the predicate alone, for actions/attest predicate-path."),
    Output("digest", "sha256:<hex> of the statement file."),
    Output(
        "commands",
        "The commands that restore the model's cached inputs by manifest, one per line.",
    ),
)
COMMENT_OUTPUTS = (
    Output("comment", "created, updated or skipped."),
    Output("comment-url", "URL of the pull-request comment; empty when skipped."),
)

GATE: Command[GateInputs] = Command(
    name="gate",
    help="Fail the job when a model's metrics miss their thresholds; with artifacts, record its "
    "provenance; with comment, report on the pull request.",
    outputs=(
        Output("passed", "true when every rule passed, else false."),
        Output("pinned", "How many manifests were pinned (0 unless pin is true)."),
        Output("failed-rules", "The failed rules, comma-separated."),
        Output("gate-report", "Path of gate.json."),
        *PROVENANCE_OUTPUTS,
        *COMMENT_OUTPUTS,
    ),
    target="gpuci.training._gate:run",
    options="gpuci.training.options:GateInputs",
    actions=("actions/metric-gate",),
)

PROVENANCE: Command[ProvenanceInputs] = Command(
    name="provenance",
    help="Record which commit, data, GPU and packages made a model (plus an in-toto statement).",
    outputs=PROVENANCE_OUTPUTS,
    target="gpuci.training._provenance:run",
    options="gpuci.training.options:ProvenanceInputs",
)

REPORT: Command[ReportInputs] = Command(
    name="report",
    help="Put the gate table and provenance in the job summary and on the pull or merge request.",
    outputs=(
        *COMMENT_OUTPUTS,
        Output("gpu-minutes", "GPU-minutes reported; empty when not measured."),
    ),
    target="gpuci.training._report:run",
    options="gpuci.training.options:ReportInputs",
)
