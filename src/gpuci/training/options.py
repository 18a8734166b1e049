"""The typed inputs of ``gate``, ``provenance`` and ``report``: one frozen dataclass each.

Field names are the inputs' names in snake_case and their types follow the specs in
:mod:`gpuci.commands.training` (``tests/test_typed.py`` checks they stay in step); the
dispatcher builds one from the resolved flags and ``INPUT_*``, once. :class:`CommentInputs` is
what posting the sticky report needs, which ``gate`` and ``report`` both extend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CommentInputs", "GateInputs", "ProvenanceInputs", "ReportInputs"]

DEFAULT_OUTPUT_DIR = "gpuci-training"
DEFAULT_MARKER = "training"


@dataclass(frozen=True)
class CommentInputs:
    """Where the sticky report goes, which ``gate`` and ``report`` both take: ``token``,
    ``api-url``, ``repository``, ``pr`` and ``marker`` (empty: the CI's own token, API,
    repository and pull request), whether to post it, and the GPU minutes it shows."""

    comment: bool = False
    token: str = ""
    api_url: str = ""
    repository: str = ""
    pr: int | None = None
    marker: str = DEFAULT_MARKER
    gpu_minutes: float | None = None


@dataclass(frozen=True)
class GateInputs(CommentInputs):
    """What ``gate`` (the metric-gate action) is given."""

    metrics: str = ""
    min: list[str] = field(default_factory=list)
    max: list[str] = field(default_factory=list)
    baseline: str = ""
    max_regression: list[str] = field(default_factory=list)
    lower_is_better: list[str] = field(default_factory=list)
    require_baseline: bool = False
    output_dir: str = DEFAULT_OUTPUT_DIR
    artifacts: list[str] = field(default_factory=list)
    python: str = ""
    pin: bool = False
    history: str = ""
    history_append: str = "auto"
    history_points: int = 20

    def rule_lines(self) -> dict[str, list[str]]:
        """The rule inputs by name (min, max, max-regression), as gate.json records them."""
        return {"min": self.min, "max": self.max, "max-regression": self.max_regression}


@dataclass(frozen=True)
class ProvenanceInputs:
    """What ``provenance`` is given."""

    artifacts: list[str] = field(default_factory=list)
    record: str = ""
    metrics: str = ""
    output_dir: str = DEFAULT_OUTPUT_DIR
    python: str = ""
    history: str = ""
    history_append: str = "auto"


@dataclass(frozen=True)
class ReportInputs(CommentInputs):
    """What ``report`` is given."""

    gate_report: str = ""
    provenance: str = ""
    history: str = ""
    history_points: int = 20
