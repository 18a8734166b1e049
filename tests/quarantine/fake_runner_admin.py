"""Fake GitHub and GitLab runner-admin APIs on 127.0.0.1, written from their REST descriptions.

GitHub under ``/api/v3`` (as GitHub Enterprise Server), GitLab under ``/gitlab/api/v4``:

- GitHub ``GET {repos/o/r|orgs/o}/actions/runners``: ``{"total_count", "runners"}``, each runner
  with ``labels: [{"id", "name", "type": "read-only"|"custom"}]``, ``page_size`` per page and
  an absolute ``Link: rel="next"``. ``DELETE .../actions/runners/{id}/labels/{name}``: answers
  the remaining labels; 404 for an unknown runner or a label it does not have, 422 for a
  read-only label (GitHub: "Validation failed"). ``POST .../actions/runners/{id}/labels``
  ``{"labels": [...]}``: 422 when ``labels`` is not a non-empty list of strings; adds custom
  labels. A repository runner is not in the organisation's list, nor the other way round.
  ``GET .../actions/runners/{id}``: one runner, 404 outside its own scope. Label names
  compare case-insensitively, as on GitHub, and a runner holds at most 100 labels (422).
  The job's installation token gets 403, as GitHub answers it.
- GitLab ``PUT /runners/:id`` (``paused``, form or JSON): 404 unknown, 403 for a runner the
  token may not manage; ``GET /runners/:id``.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from loopback_http import RoutedAPIHandler, StatefulAPIServer

GH = "/api/v3"
GL = "/gitlab/api/v4"
_SCOPE = r"(/repos/[^/]+/[^/]+|/orgs/[^/]+)"
SYSTEM_LABELS = ("self-hosted", "Linux", "X64")
MAX_LABELS = 100  # GitHub: at most 100 labels per runner


@dataclass
class Runner:
    id: int
    name: str
    scope: str  # "/repos/o/r", "/orgs/o" or "gitlab"
    labels: list[dict[str, Any]] = field(default_factory=list)
    paused: bool = False
    manageable: bool = True  # GitLab: may the token manage it

    def names(self) -> list[str]:
        return [lb["name"] for lb in self.labels]


@dataclass
class State:
    github_token: str = field(default_factory=lambda: "github_pat_" + secrets.token_hex(12))
    job_token: str = field(default_factory=lambda: "ghs_job" + secrets.token_hex(12))
    gitlab_token: str = field(default_factory=lambda: "glpat-" + secrets.token_hex(10))
    page_size: int = 2
    runners: dict[int, Runner] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    next_id: int = 10
    next_label: int = 1000

    def label(self, name: str, kind: str = "custom") -> dict[str, Any]:
        self.next_label += 1
        return {"id": self.next_label, "name": name, "type": kind}

    def add(self, name: str, scope: str, custom: list[str] | None = None) -> Runner:
        self.next_id += 1
        labels = [self.label(n, "read-only") for n in SYSTEM_LABELS]
        labels += [self.label(n) for n in custom or []]
        runner = Runner(self.next_id, name, scope, labels)
        self.runners[runner.id] = runner
        return runner

    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]


class _Handler(RoutedAPIHandler):
    state: State

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self._form_or_json() if method in ("POST", "PUT") else None
        self.state.requests.append((method, url.path, body))
        if url.path.startswith(GH):
            return self._github(method, url.path[len(GH) :], url.query, body)
        if url.path.startswith(GL):
            return self._gitlab(method, url.path[len(GL) :], body)
        return self._reply(404, {"message": "Not Found"})

    def _github(self, method: str, path: str, query: str, body: Any) -> None:
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {self.state.job_token}":
            return self._reply(403, {"message": "Resource not accessible by integration"})
        if auth != f"Bearer {self.state.github_token}":
            return self._reply(401, {"message": "Bad credentials"})
        if (m := re.fullmatch(rf"{_SCOPE}/actions/runners", path)) and method == "GET":
            items = [
                {
                    "id": r.id,
                    "name": r.name,
                    "os": "linux",
                    "status": "online",
                    "busy": True,
                    "labels": r.labels,
                }
                for r in self.state.runners.values()
                if r.scope == m[1]
            ]
            return self._page(items, query)
        if (m := re.fullmatch(rf"{_SCOPE}/actions/runners/(\d+)", path)) and method == "GET":
            one = self.state.runners.get(int(m[2]))
            if one is None or one.scope != m[1]:
                return self._reply(404, {"message": "Not Found"})
            return self._reply(
                200, {"id": one.id, "name": one.name, "status": "online", "labels": one.labels}
            )
        m = re.fullmatch(rf"{_SCOPE}/actions/runners/(\d+)/labels(?:/([^/]+))?", path)
        if m is None:
            return self._reply(404, {"message": "Not Found"})
        runner = self.state.runners.get(int(m[2]))
        if runner is None or runner.scope != m[1]:
            return self._reply(404, {"message": "Not Found"})
        if method == "DELETE" and m[3]:
            name = unquote(m[3])
            # label names are case-insensitive on GitHub
            found = next((lb for lb in runner.labels if lb["name"].lower() == name.lower()), None)
            if found is None:
                return self._reply(404, {"message": "Not Found"})
            if found["type"] == "read-only":
                return self._reply(422, {"message": "Validation Failed: read-only label"})
            runner.labels.remove(found)
            return self._labels(runner)
        if method == "POST" and not m[3]:
            labels = body.get("labels") if isinstance(body, dict) else None
            if (
                not isinstance(labels, list)
                or not labels
                or not all(isinstance(x, str) and x for x in labels)
            ):
                return self._reply(422, {"message": "Validation Failed: labels"})
            have = {n.lower() for n in runner.names()}
            if len(have | {n.lower() for n in labels}) > MAX_LABELS:
                return self._reply(422, {"message": f"Validation Failed: at most {MAX_LABELS}"})
            for name in labels:
                if name.lower() not in have:  # case-insensitive: GPU-large is gpu-large
                    runner.labels.append(self.state.label(name))
                    have.add(name.lower())
            return self._labels(runner)
        return self._reply(404, {"message": "Not Found"})

    def _labels(self, runner: Runner) -> None:
        self._reply(200, {"total_count": len(runner.labels), "labels": runner.labels})

    def _page(self, items: list[dict[str, Any]], query: str) -> None:
        page = int(parse_qs(query).get("page", ["1"])[0])
        size = self.state.page_size
        headers = {}
        if page * size < len(items):
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            path = urlsplit(self.path).path
            headers["Link"] = f'<{host}{path}?per_page={size}&page={page + 1}>; rel="next"'
        chunk = items[(page - 1) * size : page * size]
        self._reply(200, {"total_count": len(items), "runners": chunk}, headers)

    def _gitlab(self, method: str, path: str, body: Any) -> None:
        if self.headers.get("PRIVATE-TOKEN") != self.state.gitlab_token:
            return self._reply(401, {"message": "401 Unauthorized"})
        m = re.fullmatch(r"/runners/(\d+)", path)
        runner = self.state.runners.get(int(m[1])) if m else None
        if runner is None or runner.scope != "gitlab":
            return self._reply(404, {"message": "404 Not found"})
        if not runner.manageable:
            return self._reply(403, {"message": "403 Forbidden"})
        if method == "PUT":
            paused = body.get("paused") if isinstance(body, dict) else None
            if paused not in (True, False, "true", "false"):
                return self._reply(400, {"error": "paused is invalid"})
            runner.paused = paused in (True, "true")
        elif method != "GET":
            return self._reply(405, {"message": "405 Method Not Allowed"})
        return self._reply(
            200,
            {
                "id": runner.id,
                "description": runner.name,
                "paused": runner.paused,
                "active": not runner.paused,
                "tag_list": runner.names(),
            },
        )


class FakeRunnerAdmin(StatefulAPIServer):
    def __init__(self) -> None:
        super().__init__(_Handler, State())

    def github_env(self, **extra: str) -> dict[str, str]:
        return {
            "GPUCI_RUNNER_TOKEN": self.state.github_token,
            "GITHUB_API_URL": self.base + GH,
            "GITHUB_REPOSITORY": "octo/gpu",
            "GITHUB_ACTIONS": "true",
            **extra,
        }

    def gitlab_env(self, **extra: str) -> dict[str, str]:
        return {
            "GPUCI_GITLAB_TOKEN": self.state.gitlab_token,
            "CI_API_V4_URL": self.base + GL,
            "GITLAB_CI": "true",
            **extra,
        }

    def secrets(self) -> list[str]:
        return [self.state.github_token, self.state.job_token, self.state.gitlab_token]
