"""``gate``, ``provenance``, ``report``: training in CI, a metric gate, provenance, the PR report.

The ``actions/metric-gate`` action runs ``gate``, which also writes the provenance when
``artifacts`` is given and posts the report when ``comment`` is true, so one step does all three
and the dry run plans all three. ``provenance`` and ``report`` run alone from any shell or CI.
"""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

OUTPUT_DIR = Input(
    "output-dir",
    "Folder for gate.json, provenance.json, provenance.intoto.json and predicate.json.",
    "str",
    "gpuci-training",
)
ARTIFACTS = Input(
    "artifacts",
    "Trained model files to hash: paths, folders or globs, one per line.",
    "lines",
)
PYTHON = Input(
    "python",
    "Interpreter whose package versions to record (default: python3 on PATH, the job's).",
    "str",
)
METRICS = Input(
    "metrics",
    "Metrics file: JSON (flat, or nested with dotted names) or a JSONL log (last line).",
    "str",
)

REPORT_INPUTS = (
    Input(
        "comment",
        "Post or update the sticky pull-request comment (on GitLab the merge-request note; "
        "needs a token and a PR or MR).",
        "bool",
        "false",
    ),
    Input(
        "token",
        "GitHub token (default: GITHUB_TOKEN; on GitLab: GPUCI_GITLAB_TOKEN, a project access "
        "token with api scope); masked.",
        "str",
        secret=True,
        action_default="${{ github.token }}",
    ),
    Input(
        "api-url",
        "REST API root (default: GITHUB_API_URL, for GHES; on GitLab: CI_API_V4_URL).",
        "str",
    ),
    Input("repository", "owner/name (default: GITHUB_REPOSITORY).", "str"),
    Input("pr", "Pull request number (default: from the event).", "int", minimum=1),
    Input(
        "marker",
        "Name in the hidden marker that finds the comment again; one comment per marker.",
        "str",
        "training",
    ),
    Input(
        "gpu-minutes",
        "GPU-minutes to report (default: GPUs x time since this job's gpu-setup).",
        "float",
        minimum=0,
    ),
)

HISTORY_INPUTS = (
    Input(
        "history",
        "Store for the metrics history the report charts (s3://bucket/prefix or file:///dir, "
        "as the cache; default: GPUCI_METRICS_HISTORY; empty: no history).",
        "str",
    ),
    Input(
        "history-append",
        "Add this run's gated metrics to the history: auto (on the default branch and on "
        "schedules), always or never.",
        "str",
        "auto",
        choices=("auto", "always", "never"),
    ),
    Input(
        "history-points",
        "How many past runs of the history the report charts (newest).",
        "int",
        "20",
        minimum=1,
    ),
)

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

GATE = Command(
    name="gate",
    help="Fail the job when a model's metrics miss their thresholds; with artifacts, record its "
    "provenance; with comment, report on the pull request.",
    inputs=(
        Input(METRICS.name, METRICS.help, METRICS.kind, required=True),
        Input("min", "Lower bounds, name=value, one per line.", "lines"),
        Input("max", "Upper bounds, name=value, one per line.", "lines"),
        Input("baseline", "Baseline metrics file (e.g. the base branch's last run).", "str"),
        Input(
            "max-regression",
            "Allowed worsening vs the baseline, name=value or name=1%, one per line.",
            "lines",
        ),
        Input(
            "lower-is-better",
            "Metrics where lower is better (default: a lone max rule, or names such as loss).",
            "list",
        ),
        Input(
            "require-baseline",
            "Fail max-regression rules when there is no baseline (default: skip them).",
            "bool",
            "false",
        ),
        OUTPUT_DIR,
        ARTIFACTS,
        PYTHON,
        Input(
            "pin",
            "When the model passes (and artifacts is given), pin every dataset manifest its "
            "provenance names, so prune keeps what rebuilds it (cache-weights pin).",
            "bool",
            "false",
        ),
        *REPORT_INPUTS,
        *HISTORY_INPUTS,
    ),
    outputs=(
        Output("passed", "true when every rule passed, else false."),
        Output("pinned", "How many manifests were pinned (0 unless pin is true)."),
        Output("failed-rules", "The failed rules, comma-separated."),
        Output("gate-report", "Path of gate.json."),
        *PROVENANCE_OUTPUTS,
        *COMMENT_OUTPUTS,
    ),
    target="gpuci.training.gate:run",
    typed="gpuci.training.options:GateInputs",
    actions=("actions/metric-gate",),
)

PROVENANCE = Command(
    name="provenance",
    help="Record which commit, data, GPU and packages made a model (plus an in-toto statement).",
    inputs=(
        Input(ARTIFACTS.name, ARTIFACTS.help + " Required unless record is given.", "lines"),
        Input(
            "record",
            "A provenance.json to replay instead: print the commands that restore the exact "
            "inputs (cache-weights restore --manifest) of the model it records.",
            "str",
        ),
        Input(METRICS.name, METRICS.help + " Default: the one this job's gate read.", "str"),
        OUTPUT_DIR,
        PYTHON,
        *HISTORY_INPUTS[:2],
    ),
    outputs=PROVENANCE_OUTPUTS,
    target="gpuci.training.provenance:run",
    typed="gpuci.training.options:ProvenanceInputs",
)

REPORT = Command(
    name="report",
    help="Put the gate table and provenance in the job summary and on the pull or merge request.",
    inputs=(
        *REPORT_INPUTS,
        Input("gate-report", "gate.json to report (default: this job's gate).", "str"),
        Input("provenance", "provenance.json to report (default: this job's).", "str"),
        HISTORY_INPUTS[0],
        HISTORY_INPUTS[2],
    ),
    outputs=(
        *COMMENT_OUTPUTS,
        Output("gpu-minutes", "GPU-minutes reported; empty when not measured."),
    ),
    target="gpuci.training.report:run",
    typed="gpuci.training.options:ReportInputs",
)
