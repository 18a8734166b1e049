"""The typed inputs of ``gate``, ``provenance`` and ``report``: one frozen dataclass each.

Each field declares one input (:func:`gpuci.inputs.inp`); the dispatcher builds one from the
resolved flags and ``INPUT_*``, once. :class:`CommentInputs` is
what posting the sticky report needs, which ``gate`` and ``report`` both extend.
"""

from __future__ import annotations

import re

from gpuci.errors import InputError
from gpuci.inputs import inp, options

__all__ = ["CommentInputs", "GateInputs", "ProvenanceInputs", "ReportInputs"]

DEFAULT_MARKER = "training"
# What a marker may hold: it goes inside an HTML comment (``-->`` would end it early) and is
# matched as the comment's first line, so plain name characters only.
MARKER_PATTERN = re.compile(r"[A-Za-z0-9._-]*")


_HISTORY = inp(
    "Store for the metrics history the report charts (s3://bucket/prefix or file:///dir, as "
    "the cache; default: GPUCI_METRICS_HISTORY; empty: no history)."
)
_HISTORY_APPEND = inp(
    "Add this run's gated metrics to the history: auto (on the default branch and on "
    "schedules), always or never.",
    default="auto",
    choices=("auto", "always", "never"),
)
_HISTORY_POINTS = inp(
    "How many past runs of the history the report charts (newest).", default="20", minimum=1
)
_OUTPUT_DIR = inp(
    "Folder for gate.json, provenance.json, provenance.intoto.json and predicate.json.",
    default="gpuci-training",
)
_PYTHON = inp("Interpreter whose package versions to record (default: python3 on PATH, the job's).")


@options
class CommentInputs:
    """Where the sticky report goes, which ``gate`` and ``report`` both take: ``token``,
    ``api-url``, ``repository``, ``pr`` and ``marker`` (empty: the CI's own token, API,
    repository and pull request), whether to post it, and the GPU minutes it shows."""

    comment: bool = inp(
        "Post or update the sticky pull-request comment (on GitLab the merge-request note; "
        "needs a token and a PR or MR).",
        default="false",
    )
    token: str = inp(
        "GitHub token (default: GITHUB_TOKEN; on GitLab: GPUCI_GITLAB_TOKEN, a project access"
        " token with api scope); masked.",
        secret=True,
        action_default="${{ github.token }}",
    )
    api_url: str = inp(
        "REST API root (default: GITHUB_API_URL, for GHES; on GitLab: CI_API_V4_URL)."
    )
    repository: str = inp("owner/name (default: GITHUB_REPOSITORY).")
    pr: int | None = inp(
        "Pull request number (default: the runner's own copy of the event's PR or issue "
        "number, which no earlier step can rewrite; else the event file).",
        minimum=1,
        action_default="${{ github.event.pull_request.number || github.event.issue.number }}",
    )
    marker: str = inp(
        ("Name in the hidden marker that finds the comment again; one comment per marker."),
        default="training",
    )
    gpu_minutes: float | None = inp(
        "GPU-minutes to report (default: GPUs x time since this job's gpu-setup).", minimum=0
    )

    def __post_init__(self) -> None:
        """Refuse a marker that could end its HTML comment early (``x-->y``): bad input."""
        if not isinstance(self.marker, str) or not MARKER_PATTERN.fullmatch(self.marker):
            raise InputError(
                f"input 'marker' is {self.marker!r:.60}: only letters, digits, '.', '_' and '-'",
                hint="set marker to a plain name such as training or eval",
            )


@options
class GateInputs(CommentInputs):
    """What ``gate`` (the metric-gate action) is given."""

    metrics: str = inp(
        ("Metrics file: JSON (flat, or nested with dotted names) or a JSONL log (last line)."),
        required=True,
    )
    min: list[str] = inp("Lower bounds, name=value, one per line.", kind="lines")
    max: list[str] = inp("Upper bounds, name=value, one per line.", kind="lines")
    baseline: str = inp("Baseline metrics file (e.g. the base branch's last run).")
    max_regression: list[str] = inp(
        "Allowed worsening vs the baseline, name=value or name=1%, one per line.", kind="lines"
    )
    lower_is_better: list[str] = inp(
        "Metrics where lower is better (default: a lone max rule, or names such as loss)."
    )
    require_baseline: bool = inp(
        "Fail max-regression rules when there is no baseline (default: skip them).", default="false"
    )
    output_dir: str = _OUTPUT_DIR
    artifacts: list[str] = inp(
        "Trained model files to hash: paths, folders or globs, one per line.", kind="lines"
    )
    python: str = _PYTHON
    pin: bool = inp(
        "When the model passes (and artifacts is given), pin every dataset manifest its "
        "provenance names, so prune keeps what rebuilds it (cache-weights pin).",
        default="false",
    )
    history: str = _HISTORY
    history_append: str = _HISTORY_APPEND
    history_points: int = _HISTORY_POINTS

    def rule_lines(self) -> dict[str, list[str]]:
        """The rule inputs by name (min, max, max-regression), as gate.json records them."""
        return {"min": self.min, "max": self.max, "max-regression": self.max_regression}


@options
class ProvenanceInputs:
    """What ``provenance`` is given."""

    artifacts: list[str] = inp(
        "Trained model files to hash: paths, folders or globs, one per line. Required unless "
        "record is given.",
        kind="lines",
    )
    record: str = inp(
        "A provenance.json to replay instead: print the commands that restore the exact "
        "inputs (cache-weights restore --manifest) of the model it records."
    )
    metrics: str = inp(
        "Metrics file: JSON (flat, or nested with dotted names) or a JSONL log (last line). "
        "Default: the one this job's gate read."
    )
    output_dir: str = _OUTPUT_DIR
    python: str = _PYTHON
    history: str = _HISTORY
    history_append: str = _HISTORY_APPEND


@options
class ReportInputs(CommentInputs):
    """What ``report`` is given."""

    gate_report: str = inp("gate.json to report (default: this job's gate).")
    provenance: str = inp("provenance.json to report (default: this job's).")
    history: str = _HISTORY
    history_points: int = _HISTORY_POINTS
