"""The labels a one-job runner registers: this run's only, so no other job can take it.

GitHub hands a queued job to any online runner that has every label the job asks for; GitLab
gives a runner any job whose tags are a subset of its own. So a one-job runner that carries a
shared label (``gpu-large``, or ``self-hosted``, which every self-hosted runner has) can be
taken by another workflow's ``runs-on: [self-hosted, gpu-large]`` job: this run's job then
waits (up to 24 h on GitHub) and the pod bills. A label belongs to this run when it holds the
run's id as a whole number (``run-123`` for ``GITHUB_RUN_ID=123``, ``pipeline-77`` for
``CI_PIPELINE_ID=77``); in CI any other label is refused, saying why. Outside CI there is no
run id to check: only ``self-hosted`` is named, in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gpuci import settings
from gpuci.errors import InputError

__all__ = ["check", "default_labels", "run_id"]

#: The one label every GitHub self-hosted runner reports: on a one-job runner, a shared label.
SELF_HOSTED = "self-hosted"


def run_id(platform: str, environ: Mapping[str, str]) -> str:
    """This CI run's id: GitHub's ``GITHUB_RUN_ID``, GitLab's ``CI_PIPELINE_ID``; else empty."""
    run = settings.GITHUB_RUN_ID if platform == "github" else settings.CI_PIPELINE_ID
    value = run.value(environ)
    return value if value.isdigit() else ""


def default_labels(platform: str, environ: Mapping[str, str]) -> list[str]:
    """``run-<id>`` (GitHub) or ``pipeline-<id>`` (GitLab); none outside CI."""
    rid = run_id(platform, environ)
    if not rid:
        return []
    return [f"run-{rid}" if platform == "github" else f"pipeline-{rid}"]


def _belongs(label: str, rid: str) -> bool:
    return label.lower() != SELF_HOSTED and bool(re.search(rf"(?<!\d){rid}(?!\d)", label))


def check(platform: str, labels: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Refuse (in CI) shared labels on a one-job runner; the warnings to show outside CI.

    Raises:
        InputError: a label does not hold this run's id (exit 2), naming it and why.
    """
    rid = run_id(platform, environ)
    if rid:
        shared = [lb for lb in labels if not _belongs(lb, rid)]
    else:
        shared = [lb for lb in labels if lb.lower() == SELF_HOSTED]
    if not shared:
        return []
    where = "runs-on" if platform == "github" else "tags"
    example = f"run-{rid or '123'}" if platform == "github" else f"pipeline-{rid or '77'}"
    why = (
        f"runner-labels {', '.join(shared)} {'is' if len(shared) == 1 else 'are'} not this "
        f"run's: any other job whose {where} ask only for labels this one-job runner has can "
        "take it, and this run's job then waits"
    )
    fix = (
        f"register only labels with this run's id, e.g. {example}, and route the job by them "
        f"({where}: {example if platform == 'gitlab' else 'run-${{ github.run_id }}'})"
    )
    if rid:
        raise InputError(why, hint=fix)
    return [f"{why} ({fix}; outside CI there is no run id to check)"]
