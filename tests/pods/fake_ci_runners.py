"""Fake GitHub and GitLab runner APIs on 127.0.0.1, plus a file server for runner tarballs.

GitHub under ``/api/v3`` (as GitHub Enterprise Server), GitLab under ``/gitlab/api/v4`` (a
self-managed GitLab behind a path), so a client that drops the base path fails here:

- GitHub: ``POST {repos/o/r|orgs/o}/actions/runners/generate-jitconfig`` (body checked:
  ``name``, ``labels``, ``runner_group_id``, ``work_folder``; a duplicate name is 409; the
  job's installation token gets 403 "Resource not accessible by integration", as on GitHub),
  ``GET .../actions/runners`` (``{"total_count", "runners"}``, ``page_size`` per page, an
  absolute ``Link: rel="next"``), ``DELETE .../actions/runners/{id}``.
- GitLab: ``POST /user/runners`` (``runner_type=project_type``, ``project_id``, ``tag_list``,
  ``run_untagged=false``; answers ``id`` and a ``glrt-`` token), ``GET
  /projects/:id/runners``, ``DELETE /runners/:id`` (admin token) and ``DELETE /runners`` with
  the runner's own ``token`` (form or JSON), as GitLab documents.
- GitHub's ``GET /repos/actions/runner/releases`` (newest first, as GitHub lists them): each
  release's notes carry the sha256 lines actions/runner's release workflow writes
  (``<!-- BEGIN SHA linux-x64 -->HEX<!-- END SHA linux-x64 -->``) and its assets GitHub's
  ``digest`` (``sha256:HEX``). ``NEWEST_KNOWN`` is the newest real release we know of, with its
  published hash: the pinned fallback must not be older.
- ``files``: raw bytes served by path without auth (the runner release mirror).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from loopback_http import RoutedAPIHandler, StatefulAPIServer

GH = "/api/v3"
MAX_LABELS = 100  # GitHub: at most 100 labels per runner
GL = "/gitlab/api/v4"
_GH_SCOPE = r"(?:/repos/[^/]+/[^/]+|/orgs/[^/]+)"


# actions/runner v2.338.0: the sha256 its release notes publish for the linux-x64 tarball.
NEWEST_KNOWN = ("2.338.0", "af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32")


def release(
    version: str, sha256: str, published_at: str, *, digest: bool = True, notes: bool = True
) -> dict[str, Any]:
    """One actions/runner release as ``GET /repos/actions/runner/releases`` lists it."""
    name = f"actions-runner-linux-x64-{version}.tar.gz"
    body = (
        "## What's Changed\n* ...\n\n## SHA-256 Checksums\n\n"
        "The SHA-256 checksums for the packages included in this build are shown below:\n\n"
        f"- actions-runner-win-x64-{version}.zip <!-- BEGIN SHA win-x64 -->{'0' * 64}"
        "<!-- END SHA win-x64 -->\n"
    )
    if notes:
        body += f"- {name} <!-- BEGIN SHA linux-x64 -->{sha256}<!-- END SHA linux-x64 -->\n"
    asset: dict[str, Any] = {"name": name, "size": 1, "browser_download_url": "https://x/" + name}
    if digest:
        asset["digest"] = "sha256:" + sha256
    return {
        "tag_name": f"v{version}",
        "name": f"v{version}",
        "draft": False,
        "prerelease": False,
        "published_at": published_at,
        "created_at": published_at,
        "body": body,
        "assets": [asset],
    }


@dataclass
class Runner:
    id: int
    name: str
    labels: list[str]
    scope: str  # "/repos/o/r", "/orgs/o" or "project:ID"
    token: str = ""  # GitLab's glrt- token
    status: str = "offline"
    busy: bool = False  # running a job: GitHub refuses to delete it (422)
    reads: int = 0  # status reads so far


@dataclass
class State:
    github_token: str = field(default_factory=lambda: "github_pat_" + secrets.token_hex(12))
    job_token: str = field(default_factory=lambda: "ghs_job" + secrets.token_hex(12))
    gitlab_token: str = field(default_factory=lambda: "glpat-" + secrets.token_hex(10))
    # The GitLab token's scopes: create_runner makes runners only; reading and deleting them
    # needs api (or read_api to read), as GitLab checks.
    gitlab_scopes: set[str] = field(default_factory=lambda: {"create_runner", "api"})
    page_size: int = 2
    runners: dict[int, Runner] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    issued: list[str] = field(default_factory=list)  # every credential handed out
    next_id: int = 100
    lose_answers: int = 0  # registrations that make the runner, then answer 502 (answer lost)
    # A registered runner is listed offline until its listener connects: here, after this
    # many reads of its status (None: never, a pod that never starts its runner).
    online_after_reads: int | None = 0
    on_status_read: Any = None  # called with the Runner before each status read (tests)
    # ``GET /repos/{owner}/{repo}/commits/{ref}``: "owner/repo@ref" -> the commit's sha
    commits: dict[str, str] = field(default_factory=dict)
    releases: list[dict[str, Any]] = field(
        default_factory=lambda: [release(*NEWEST_KNOWN, "2026-10-01T12:00:00Z")]
    )

    def add(self, name: str, scope: str, labels: list[str] | None = None) -> Runner:
        self.next_id += 1
        runner = Runner(self.next_id, name, labels or [], scope)
        self.runners[runner.id] = runner
        return runner

    def read_status(self, runner: Runner) -> str:
        if self.on_status_read is not None:
            self.on_status_read(runner)
        runner.reads += 1
        after = self.online_after_reads
        if runner.status == "offline" and after is not None and runner.reads > after:
            runner.status = "online"
        return runner.status

    def names(self) -> list[str]:
        return sorted(r.name for r in self.runners.values())


class _Handler(RoutedAPIHandler):
    state: State

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        if method == "GET" and url.path in self.state.files:
            data = self.state.files[url.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = self._form_or_json() if method in ("POST", "DELETE") else None
        self.state.requests.append((method, url.path, body))
        if url.path.startswith(GH):
            return self._github(method, url.path[len(GH) :], url.query, body)
        if url.path.startswith(GL):
            return self._gitlab(method, url.path[len(GL) :], url.query, body)
        return self._reply(404, {"message": "Not Found"})

    def _page(self, items: list[dict[str, Any]], query: str, wrap: bool) -> None:
        page = int(parse_qs(query).get("page", ["1"])[0])
        size = self.state.page_size
        chunk = items[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(items):
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            path = urlsplit(self.path).path
            headers["Link"] = f'<{host}{path}?per_page={size}&page={page + 1}>; rel="next"'
        answer: Any = {"total_count": len(items), "runners": chunk} if wrap else chunk
        self._reply(200, answer, headers)

    def _github(self, method: str, path: str, query: str, body: Any) -> None:
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {self.state.job_token}":
            return self._reply(403, {"message": "Resource not accessible by integration"})
        if auth != f"Bearer {self.state.github_token}":
            return self._reply(401, {"message": "Bad credentials"})
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/(.+)", path)) and method == "GET":
            sha = self.state.commits.get(f"{m[1]}@{m[2]}")
            if sha is None:  # GitHub's answer for a ref it does not have
                return self._reply(422, {"message": f"No commit found for SHA: {m[2]}"})
            return self._reply(200, {"sha": sha, "commit": {"message": "x"}})
        if path == "/repos/actions/runner/releases" and method == "GET":
            size = int(parse_qs(query).get("per_page", ["30"])[0])
            return self._reply(200, self.state.releases[: min(size, 100)])
        if m := re.fullmatch(rf"({_GH_SCOPE})/actions/runners/generate-jitconfig", path):
            if method != "POST":
                return self._reply(405, {"message": "method"})
            problems = _jit_problems(body)
            if problems:
                return self._reply(422, {"message": "; ".join(problems)})
            if body["name"] in self.state.names():
                return self._reply(409, {"message": "Already exists - A runner with this name"})
            runner = self.state.add(body["name"], m[1], body["labels"])
            config = "JIT" + secrets.token_urlsafe(24)
            self.state.issued.append(config)
            if self._answer_lost():
                return self._reply(502, {"message": "Bad gateway"})
            return self._reply(
                201,
                {
                    "runner": {"id": runner.id, "name": runner.name, "status": "offline"},
                    "encoded_jit_config": config,
                },
            )
        if m := re.fullmatch(rf"({_GH_SCOPE})/actions/runners", path):
            items = [
                {
                    "id": r.id,
                    "name": r.name,
                    "status": r.status,
                    "busy": False,
                    "labels": [
                        {"id": i, "name": n, "type": "custom"} for i, n in enumerate(r.labels)
                    ],
                }
                for r in self.state.runners.values()
                if r.scope == m[1]
            ]
            return self._page(items, query, wrap=True)
        if m := re.fullmatch(rf"({_GH_SCOPE})/actions/runners/(\d+)", path):
            found = self.state.runners.get(int(m[2]))
            if found is None or found.scope != m[1]:
                return self._reply(404, {"message": "Not Found"})
            if method == "GET":
                status = self.state.read_status(found)
                return self._reply(
                    200,
                    {"id": found.id, "name": found.name, "status": status, "busy": found.busy},
                )
            if method != "DELETE":
                return self._reply(404, {"message": "Not Found"})
            if found.busy:  # as GitHub answers for a runner in the middle of a job
                return self._reply(
                    422,
                    {"message": f'Bad request - Runner "{found.name}" is still running a job"'},
                )
            del self.state.runners[found.id]
            return self._reply(204, {})
        return self._reply(404, {"message": "Not Found"})

    def _gitlab(self, method: str, path: str, query: str, body: Any) -> None:
        if path == "/runners" and method == "DELETE":  # the runner deletes itself
            token = (body or {}).get("token", "")
            for runner in list(self.state.runners.values()):
                if runner.token and runner.token == token:
                    del self.state.runners[runner.id]
                    return self._reply(204, {})
            return self._reply(403, {"message": "403 Forbidden"})
        if self.headers.get("PRIVATE-TOKEN") != self.state.gitlab_token:
            return self._reply(401, {"message": "401 Unauthorized"})
        need = {"create_runner", "api"} if path == "/user/runners" else {"api"}
        if method == "GET" and path != "/user/runners":
            need = {"api", "read_api"}
        if not need & self.state.gitlab_scopes:
            return self._reply(
                403,
                {
                    "error": "insufficient_scope",
                    "error_description": "The request requires higher privileges than "
                    "provided by the access token.",
                    "scope": " ".join(sorted(need)),
                },
            )
        if path == "/user/runners" and method == "POST":
            problems = _gitlab_problems(body)
            if problems:
                return self._reply(400, {"message": "; ".join(problems)})
            runner = self.state.add(
                body["description"], f"project:{body['project_id']}", body["tag_list"].split(",")
            )
            runner.token = "glrt-" + secrets.token_urlsafe(20)
            self.state.issued.append(runner.token)
            if self._answer_lost():
                return self._reply(502, {"message": "502 Bad Gateway"})
            return self._reply(
                201, {"id": runner.id, "token": runner.token, "token_expires_at": None}
            )
        if m := re.fullmatch(r"/projects/([^/]+)/runners", path):
            items = [
                {"id": r.id, "description": r.name, "status": r.status, "is_shared": False}
                for r in self.state.runners.values()
                if r.scope == f"project:{m[1]}"
            ]
            return self._page(items, query, wrap=False)
        if (m := re.fullmatch(r"/runners/(\d+)", path)) and method == "GET":
            found = self.state.runners.get(int(m[1]))
            if found is None:
                return self._reply(404, {"message": "404 Not found"})
            status = self.state.read_status(found)
            return self._reply(200, {"id": found.id, "description": found.name, "status": status})
        if (m := re.fullmatch(r"/runners/(\d+)", path)) and method == "DELETE":
            if self.state.runners.pop(int(m[1]), None) is None:
                return self._reply(404, {"message": "404 Not found"})
            return self._reply(204, {})
        return self._reply(404, {"message": "404 Not found"})

    def _answer_lost(self) -> bool:
        if self.state.lose_answers > 0:
            self.state.lose_answers -= 1
            return True
        return False

    def _reply(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if code == 204:
            self.send_response(204)
            self.end_headers()
            return
        super()._reply(code, body, headers)


def _jit_problems(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["body is not an object"]
    out = []
    if not isinstance(body.get("name"), str) or not body["name"]:
        out.append("name is required")
    labels = body.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        out.append("labels must be a non-empty list of strings")
    elif len({x.lower() for x in labels}) > MAX_LABELS:  # names are case-insensitive
        out.append(f"a runner has at most {MAX_LABELS} labels")
    if not isinstance(body.get("runner_group_id"), int):
        out.append("runner_group_id must be an integer")
    if not isinstance(body.get("work_folder"), str):
        out.append("work_folder must be a string")
    return out


def _gitlab_problems(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["body is not an object"]
    out = []
    if body.get("runner_type") != "project_type":
        out.append("runner_type must be project_type")
    project = body.get("project_id")
    if project in (None, ""):
        out.append("project_id is required for project_type")
    elif isinstance(project, bool) or not (
        isinstance(project, int) or (isinstance(project, str) and project.isdigit())
    ):
        out.append("project_id is invalid")  # an Integer in GitLab's API, not a path
    if not isinstance(body.get("tag_list"), str) or not body["tag_list"]:
        out.append("tag_list is required")
    if body.get("run_untagged") not in (False, "false"):
        out.append("run_untagged must be false")
    return out


class FakeRunnersAPI(StatefulAPIServer):
    def __init__(self) -> None:
        super().__init__(_Handler, State())

    @property
    def github_api(self) -> str:
        return self.base + GH

    @property
    def gitlab_api(self) -> str:
        return self.base + GL

    def github_env(self, **extra: str) -> dict[str, str]:
        return {
            "GPUCI_RUNNER_TOKEN": self.state.github_token,
            "GITHUB_API_URL": self.github_api,
            "GITHUB_REPOSITORY": "octo/gpu",
            **extra,
        }

    def gitlab_env(self, **extra: str) -> dict[str, str]:
        return {
            "GPUCI_GITLAB_TOKEN": self.state.gitlab_token,
            "CI_API_V4_URL": self.gitlab_api,
            "CI_SERVER_URL": self.base + "/gitlab",
            "CI_PROJECT_ID": "42",
            **extra,
        }
