"""The GitHub and GitLab calls a just-in-time runner needs: register, list, delete.

Both stand on the shared REST client (``gpuci.forges._rest``): retries, one-line errors with
their fix, origin-only pagination, no redirects, redacted excerpts. A registration is one
attempt (a POST whose answer was lost may have made the runner: ``up`` then deletes it by
name). Only these clients hold the admin token; the pod never sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gpuci import settings
from gpuci.errors import InfraError, InputError
from gpuci.forges import _github as gh
from gpuci.forges._gitlab import GitLabApi
from gpuci.forges._rest import ApiClient, Forbidden
from gpuci.forges._runner_admin import github_runners

GITHUB_TOKEN_MAKE = (
    "make a fine-grained personal access token (or a GitHub App token) with "
    "'Administration: read and write' on the repository ('Self-hosted runners: read and "
    "write' on the organisation for runner-scope org) and pass it as the secret "
    + settings.RUNNER_TOKEN.name
)
GITHUB_TOKEN_HELP = "the job's GITHUB_TOKEN cannot create runners: " + GITHUB_TOKEN_MAKE
GITLAB_TOKEN_HELP = (
    f"set {settings.GITLAB_TOKEN.name} to a project, group or personal access token with the "
    "create_runner scope (and api, for down/reap to list and delete runners); CI_JOB_TOKEN "
    "cannot create runners"
)


@dataclass(frozen=True)
class Listed:
    """A runner as the platform lists it."""

    runner_id: int
    name: str
    status: str = ""
    labels: tuple[str, ...] = ()  # GitHub lists them; GitLab's project listing does not


def _runner_id(found: Any, service: str) -> int:
    rid = found.get("id") if isinstance(found, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise InfraError(
            f"{service} answered a runner without a numeric id",
            hint=f"check the {service} API URL",
        )
    return rid


def _status(client: ApiClient, url: str) -> str | None:
    """A runner's status as the platform lists it ("busy" when GitHub says so); None: gone."""
    response = client._send_unless_gone("GET", url)
    if response is None:
        return None
    found = client._json(response, "a runner", dict)
    if found.get("busy") is True:
        return "busy"
    return str(found.get("status") or "unknown")


class RunnerBusy(InputError):
    """GitHub refuses to delete a runner in the middle of a job (HTTP 422)."""


def _delete(client: ApiClient, url: str) -> bool:
    """DELETE ``url``; False when the API says it is already gone (404)."""
    try:
        return client._send_unless_gone("DELETE", url) is not None
    except InputError as exc:
        if "HTTP 422" in exc.message and "running a job" in exc.message:
            raise RunnerBusy(exc.message, hint="it is deleted once its job is over") from None
        raise


class GitHubRunners(gh.GitHubReader):
    """``generate-jitconfig``, list and delete self-hosted runners of a repository or org."""

    hint_401 = f"set {settings.RUNNER_TOKEN.name} to a valid token with administration rights"
    hint_403 = (
        f"give the token in {settings.RUNNER_TOKEN.name} 'Administration: read and write' on the "
        "repository ('Self-hosted runners: read and write' on the organisation for "
        "runner-scope org)"
    )
    hint_404 = (
        "check GITHUB_REPOSITORY (the organisation for runner-scope org), GITHUB_API_URL and "
        "that the token can see it"
    )
    forbidden_what = "the token may not manage self-hosted runners"

    def __init__(self, api_url: str, token: str, scope: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, **kwargs)
        kind, _, where = scope.partition(":")
        self.base = f"/orgs/{quote(where, safe='')}" if kind == "org" else f"/repos/{where}"

    def jit_call(self, name: str, labels: Sequence[str], group_id: int) -> dict[str, Any]:
        """The generate-jitconfig request, as a plan shows it.

        The labels are exactly the ones asked for: no ``self-hosted`` (a JIT configuration's
        labels are what the request names; every self-hosted runner has that one, so on a
        one-job runner it would let any ``runs-on: self-hosted`` job take it). The job is
        routed by this run's label (``runs-on: run-${{ github.run_id }}``).
        """
        wanted = list(labels)
        return {
            "method": "POST",
            "path": f"{self.base}/actions/runners/generate-jitconfig",
            "body": {
                "name": name,
                "labels": wanted,
                "runner_group_id": group_id,
                "work_folder": "_work",
            },
        }

    def register(self, name: str, labels: Sequence[str], group_id: int) -> tuple[str, int]:
        """``(encoded_jit_config, runner id)``. One attempt: a POST that lost its answer may
        have made the runner, which ``up``'s failure path then deletes by name."""
        call = self.jit_call(name, labels, group_id)
        try:
            response = self._send_once("POST", call["path"], json=call["body"])
        except Forbidden as exc:
            if "not accessible by integration" in exc.message.lower():
                raise InputError(
                    "GitHub refused to create the runner: " + GITHUB_TOKEN_HELP,
                    hint=f"pass a token with administration rights as {settings.RUNNER_TOKEN.name}",
                ) from None
            raise
        found = self._json(response, "a just-in-time runner configuration", dict)
        config = found.get("encoded_jit_config")
        if not isinstance(config, str) or not config:
            raise InfraError(
                "GitHub answered generate-jitconfig without encoded_jit_config",
                hint=self._api_hint,
            )
        return config, _runner_id(found.get("runner"), self.service)

    def listed(self) -> list[Listed]:
        return [
            Listed(r.runner_id, r.name, r.status, r.labels) for r in github_runners(self, self.base)
        ]

    def status(self, runner_id: int) -> str | None:
        """``online``, ``offline`` or ``busy``; None when the runner is gone."""
        return _status(self, f"{self.base}/actions/runners/{int(runner_id)}")

    def delete(self, runner_id: int) -> bool:
        """Delete a runner; False when it was already gone."""
        return _delete(self, f"{self.base}/actions/runners/{int(runner_id)}")


class GitLabRunners(GitLabApi):
    """``POST /user/runners``, list a project's runners, ``DELETE /runners/:id``."""

    hint_401 = f"set {settings.GITLAB_TOKEN.name} to a valid token with the create_runner scope"
    hint_403 = GITLAB_TOKEN_HELP
    hint_404 = "check CI_PROJECT_ID and CI_API_V4_URL"
    forbidden_what = "the token may not manage runners"

    def __init__(self, api_url: str, token: str, scope: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, **kwargs)
        self.project = scope.partition(":")[2]

    def jit_call(self, name: str, labels: Sequence[str], group_id: int) -> dict[str, Any]:
        return {
            "method": "POST",
            "path": "/user/runners",
            "body": {
                "runner_type": "project_type",
                "project_id": int(self.project) if self.project.isdigit() else self.project,
                "description": name,
                "tag_list": ",".join(labels),
                "run_untagged": False,  # only jobs tagged with this pipeline's tag
                "locked": True,  # and only this project's
            },
        }

    def register(self, name: str, labels: Sequence[str], group_id: int) -> tuple[str, int]:
        """``(glrt- token, runner id)``; one attempt, as for GitHub."""
        call = self.jit_call(name, labels, group_id)
        response = self._send_once("POST", call["path"], json=call["body"])
        found = self._json(response, "the created runner", dict)
        token = found.get("token")
        if not isinstance(token, str) or not token:
            raise InfraError("GitLab created a runner without a token", hint=self._api_hint)
        return token, _runner_id(found, self.service)

    def listed(self) -> list[Listed]:
        out = []
        url = f"/projects/{quote(self.project, safe='')}/runners"
        # GitLab lists the project's groups' and the instance's runners here too: never ours
        only_its_own = {"type": "project_type"}
        for page in self.pages(url, "runners", whole=True, query=only_its_own):
            for item in page:
                name = item.get("description")
                if isinstance(item.get("id"), int) and isinstance(name, str):
                    out.append(Listed(item["id"], name, str(item.get("status") or "")))
        return out

    def status(self, runner_id: int) -> str | None:
        """``online``, ``offline``, ``never_contacted``, ``stale``; None when it is gone."""
        return _status(self, f"/runners/{int(runner_id)}")

    def delete(self, runner_id: int) -> bool:
        """Delete a runner; False when it was already gone."""
        return _delete(self, f"/runners/{int(runner_id)}")


Client = GitHubRunners | GitLabRunners
