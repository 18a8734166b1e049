"""Where this run happens: repository, commit, workflow run, pull request.

Read once from the platform's own variables (``GITHUB_*`` on Actions, ``CI_*`` on GitLab) and
from ``git`` elsewhere, so provenance and the report name the same commit and run everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.untrusted_child import git

# GitHub caps a webhook's payload at 25 MB; the event file is that payload.
_MAX_EVENT = 32 << 20
# A PR or MR number as the platform writes it: ASCII digits (``str.isdigit`` and ``\d`` also
# take "²" or "٣"), few enough for int() (which refuses over 4,300 digits).
_NUMBER = r"[0-9]{1,15}"


@dataclass(frozen=True)
class RunContext:
    platform: str  # github | gitlab | local
    repository: str = ""  # owner/name or group/project
    server_url: str = ""
    commit: str = ""
    ref: str = ""
    workflow: str = ""  # workflow ref on GitHub, pipeline source on GitLab
    run_id: str = ""
    run_attempt: str = ""
    run_url: str = ""
    job: str = ""
    runner: str = ""  # github-hosted | self-hosted | a GitLab runner id
    pull_request: int | None = None


def github_event(env: Mapping[str, str]) -> dict[str, Any]:
    """The event payload (``GITHUB_EVENT_PATH``), ``{}`` when there is none or it is unusable:
    the runner wrote it, but any earlier step of the job (the PR's code) may rewrite it."""
    path = settings.GITHUB_EVENT_PATH.value(env)
    try:  # a file, not a FIFO that blocks the read
        text = untrusted_json.read_text(Path(path), _MAX_EVENT) if Path(path).is_file() else "{}"
        event = untrusted_json.loads(text)
    except (OSError, untrusted_json.Unusable):
        return {}
    return event if isinstance(event, dict) else {}


def _github_pr(env: Mapping[str, str]) -> int | None:
    """The PR number from ``refs/pull/<n>/`` in ``GITHUB_REF``, else from the event payload.

    The runner sets ``GITHUB_REF`` for the step and no step can change it, while any earlier
    step (the PR's code) may rewrite the event file: it is read only where the ref names no
    pull request (``pull_request_target`` and ``issue_comment`` run on the default branch).
    """
    match = re.match(rf"^refs/pull/({_NUMBER})/", settings.GITHUB_REF.value(env))
    if match:
        return int(match.group(1))
    event = github_event(env)
    pull, issue = (event.get(k) for k in ("pull_request", "issue"))
    for number in (
        pull.get("number") if isinstance(pull, dict) else None,
        issue.get("number") if isinstance(issue, dict) and issue.get("pull_request") else None,
    ):
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


def detect(env: Mapping[str, str]) -> RunContext:
    if settings.GITHUB_ACTIONS.is_true(env) or settings.GITHUB_REPOSITORY.is_set(env):
        server = settings.GITHUB_SERVER_URL.value(env).rstrip("/")
        repo = settings.GITHUB_REPOSITORY.value(env)
        run_id = settings.GITHUB_RUN_ID.value(env)
        attempt = settings.GITHUB_RUN_ATTEMPT.value(env)
        url = f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else ""
        if url and attempt:
            url += f"/attempts/{attempt}"
        return RunContext(
            platform="github",
            repository=repo,
            server_url=server,
            commit=settings.GITHUB_SHA.value(env) or git("rev-parse", "HEAD"),
            ref=settings.GITHUB_REF.value(env),
            workflow=settings.GITHUB_WORKFLOW_REF.value(env) or settings.GITHUB_WORKFLOW.value(env),
            run_id=run_id,
            run_attempt=attempt,
            run_url=url,
            job=settings.GITHUB_JOB.value(env),
            runner=settings.RUNNER_ENVIRONMENT.value(env),
            pull_request=_github_pr(env),
        )
    if settings.GITLAB_CI.is_true(env):
        mr = settings.CI_MERGE_REQUEST_IID.value(env)
        return RunContext(
            platform="gitlab",
            repository=settings.CI_PROJECT_PATH.value(env),
            server_url=settings.CI_SERVER_URL.value(env).rstrip("/"),
            commit=settings.CI_COMMIT_SHA.value(env),
            ref=settings.CI_COMMIT_REF_NAME.value(env),
            workflow=settings.CI_PIPELINE_SOURCE.value(env),
            run_id=settings.CI_PIPELINE_ID.value(env),
            run_url=settings.CI_JOB_URL.value(env) or settings.CI_PIPELINE_URL.value(env),
            job=settings.CI_JOB_NAME.value(env),
            runner=settings.CI_RUNNER_ID.value(env),
            pull_request=int(mr) if re.fullmatch(_NUMBER, mr) else None,
        )
    remote = git("config", "--get", "remote.origin.url")
    return RunContext(
        platform="local",
        repository=remote,
        commit=git("rev-parse", "HEAD"),
        ref=git("rev-parse", "--abbrev-ref", "HEAD"),
    )


def builder_id(ctx: RunContext) -> str:
    """SLSA ``builder.id``: the platform that ran the build, as GitHub's own attestations say."""
    if ctx.platform == "github":
        kind = "github-hosted" if ctx.runner == "github-hosted" else "self-hosted"
        return f"https://github.com/actions/runner/{kind}"
    if ctx.platform == "gitlab" and ctx.server_url:
        return f"{ctx.server_url}/-/runners/{ctx.runner or 'unknown'}"
    return "local"
