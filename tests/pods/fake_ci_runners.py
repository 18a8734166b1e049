"""Fakes of the GitHub and GitLab runner APIs on 127.0.0.1, for ``pods up --runner``.

**GitHub** (under ``/api/v3``, as GitHub Enterprise Server serves, so a client that drops
``GITHUB_API_URL``'s path fails here): ``POST .../actions/runners/generate-jitconfig`` for a
repository or an organisation (201 ``{runner, encoded_jit_config}``; 409 for a name that
exists; 404 for an unknown runner group; 422 for a body GitHub's schema refuses), the list of
runners (``{total_count, runners}``, paged with ``Link``) and ``DELETE`` of one. The admin token
is a Bearer token; the job's ``GITHUB_TOKEN`` gets 403 "Resource not accessible by
integration", as on GitHub. A just-in-time runner gets exactly the labels it was registered
with: GitHub adds no default ``self-hosted`` label to it, so a job's ``runs-on`` is matched
against what gpu-ci asked for (``runs_job``).

**GitLab** (under ``/gitlab/api/v4``, a GitLab behind a path): ``POST /user/runners`` (201
``{id, token: glrt-...}``), a project's runners, ``DELETE /runners/:id`` with the admin token
and ``DELETE /runners`` with the runner's own token (what the pod does when it is done).
``PRIVATE-TOKEN`` must be the admin token; the job token gets 403.

Every request is recorded; every credential the fakes hand out is kept, so tests can look for
it in logs.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from loopback_http import JsonAPIHandler, LoopbackHTTPServer

GITHUB_PREFIX = "/api/v3"
GITLAB_PREFIX = "/gitlab/api/v4"
_GH_SCOPE = r"(?P<scope>repos/[^/]+/[^/]+|orgs/[^/]+)"
_GH_JIT = re.compile(rf"^{GITHUB_PREFIX}/{_GH_SCOPE}/actions/runners/generate-jitconfig$")
_GH_LIST = re.compile(rf"^{GITHUB_PREFIX}/{_GH_SCOPE}/actions/runners$")
_GH_ONE = re.compile(rf"^{GITHUB_PREFIX}/{_GH_SCOPE}/actions/runners/(?P<id>\d+)$")
_GL_PROJECT_RUNNERS = re.compile(rf"^{GITLAB_PREFIX}/projects/(?P<project>[^/]+)/runners$")
_GL_ONE = re.compile(rf"^{GITLAB_PREFIX}/runners/(?P<id>\d+)$")


@dataclass
class Request:
    method: str
    path: str
    body: Any


@dataclass
class Runner:
    id: int
    name: str
    scope: str  # "repos/o/r", "orgs/o" or "projects/<id>"
    labels: list[str]
    credential: str = field(repr=False)
    status: str = "offline"
    run_untagged: bool | None = None  # GitLab only


class _FakeRunnerAPI:
    """What both fakes share: runners, the credentials handed out, the request log."""

    def __init__(self, token: str, job_token: str) -> None:
        self.token = token
        self.job_token = job_token
        self.runners: dict[int, Runner] = {}
        self.requests: list[Request] = []
        self.credentials: list[str] = []  # every JIT config / glrt- token handed out
        self.lock = threading.Lock()
        self._next_id = 100
        self._server: LoopbackHTTPServer | None = None

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def registered(self, scope: str | None = None) -> list[Runner]:
        return [r for r in self.runners.values() if scope is None or r.scope == scope]

    def calls(self, method: str, pattern: str = ".*") -> list[Request]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    def _serve(self, handler_cls: type[JsonAPIHandler]) -> None:
        self._server = LoopbackHTTPServer(handler_cls)
        self._server.__enter__()

    def stop(self) -> None:
        if self._server is not None:
            self._server.__exit__(None, None, None)

    @property
    def origin(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}"


class FakeGitHubRunners(_FakeRunnerAPI):
    def __init__(
        self,
        token: str = "github_pat_admin_" + secrets.token_hex(8),
        job_token: str = "ghs_jobtoken_" + secrets.token_hex(8),
        groups: Iterable[int] = (1,),
        page_size: int = 2,
    ) -> None:
        super().__init__(token, job_token)
        self.groups = set(groups)
        self.page_size = page_size
        fake = self

        class Handler(JsonAPIHandler):
            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                body = self._body() if method == "POST" else None
                with fake.lock:
                    fake.requests.append(Request(method, url.path, body))
                    code, answer, headers = fake._route(method, url.path, url.query, body, self)
                if code == 204:
                    self.send_response(204)
                    self.end_headers()
                else:
                    self._reply(code, answer, headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self._serve(Handler)

    @property
    def api_url(self) -> str:
        return self.origin + GITHUB_PREFIX

    def runs_job(self, runner: Runner, runs_on: Iterable[str]) -> bool:
        """Whether GitHub would give this runner a job with ``runs_on``: every label of the
        job must be one of the runner's (case-insensitive, as GitHub matches)."""
        have = {label.lower() for label in runner.labels}
        return all(label.lower() in have for label in runs_on)

    def _route(
        self, method: str, path: str, query: str, body: Any, handler: JsonAPIHandler
    ) -> tuple[int, Any, dict[str, str]]:
        auth = handler.headers.get("Authorization", "")
        if auth == f"Bearer {self.job_token}":
            return 403, {"message": "Resource not accessible by integration"}, {}
        if auth != f"Bearer {self.token}":
            return 401, {"message": "Bad credentials"}, {}
        if handler.headers.get("X-GitHub-Api-Version") is None:
            return 400, {"message": "missing X-GitHub-Api-Version"}, {}
        if (m := _GH_JIT.match(path)) and method == "POST":
            return self._jit(m["scope"], body)
        if (m := _GH_LIST.match(path)) and method == "GET":
            return self._list(m["scope"], path, query)
        if (m := _GH_ONE.match(path)) and method == "DELETE":
            found = self.runners.get(int(m["id"]))
            if found is None or found.scope != m["scope"]:
                return 404, {"message": "Not Found"}, {}
            del self.runners[found.id]
            return 204, None, {}
        return 404, {"message": "Not Found"}, {}

    def _jit(self, scope: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        allowed = {"name", "runner_group_id", "labels", "work_folder"}
        problems = []
        if not isinstance(body, dict):
            problems.append("body is not an object")
            body = {}
        problems += [f"unknown key {k}" for k in sorted(set(body) - allowed)]
        name, group, labels = body.get("name"), body.get("runner_group_id"), body.get("labels")
        if not isinstance(name, str) or not name:
            problems.append("name is required")
        if isinstance(group, bool) or not isinstance(group, int):
            problems.append("object is missing required key: runner_group_id")
        if (
            not isinstance(labels, list)
            or not 1 <= len(labels) <= 100
            or not all(isinstance(x, str) and x for x in labels)
        ):
            problems.append("labels: 1 to 100 strings")
        if problems:
            return 422, {"message": "Invalid input: " + "; ".join(problems)}, {}
        if group not in self.groups:
            return 404, {"message": "Runner group not found"}, {}
        if any(r.name == name and r.scope == scope for r in self.runners.values()):
            return 409, {"message": "Already exists - A runner with the same name exists"}, {}
        secret = secrets.token_hex(16)
        config = base64.b64encode(
            json.dumps({".runner": {"AgentName": name}, ".credentials": secret}).encode()
        ).decode()
        runner = Runner(self._new_id(), name, scope, list(labels), config)
        self.runners[runner.id] = runner
        self.credentials.append(config)
        return 201, {"runner": self._view(runner), "encoded_jit_config": config}, {}

    def _list(self, scope: str, path: str, query: str) -> tuple[int, Any, dict[str, str]]:
        params = parse_qs(query)
        size = min(int(params.get("per_page", ["30"])[0]), self.page_size)
        page = int(params.get("page", ["1"])[0])
        mine = [self._view(r) for r in self.runners.values() if r.scope == scope]
        headers = {}
        if page * size < len(mine):
            headers["Link"] = f'<{self.origin}{path}?per_page={size}&page={page + 1}>; rel="next"'
        chunk = mine[(page - 1) * size : page * size]
        return 200, {"total_count": len(mine), "runners": chunk}, headers

    @staticmethod
    def _view(runner: Runner) -> dict[str, Any]:
        return {
            "id": runner.id,
            "name": runner.name,
            "os": "unknown",
            "status": runner.status,
            "busy": False,
            "labels": [
                {"id": i + 1, "name": n, "type": "custom"} for i, n in enumerate(runner.labels)
            ],
        }


class FakeGitLabRunners(_FakeRunnerAPI):
    def __init__(
        self,
        token: str = "glpat-admin-" + secrets.token_hex(8),
        job_token: str = "glcbt-job-" + secrets.token_hex(8),
        page_size: int = 2,
    ) -> None:
        super().__init__(token, job_token)
        self.page_size = page_size
        fake = self

        class Handler(JsonAPIHandler):
            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                body = self._read_body()
                with fake.lock:
                    fake.requests.append(Request(method, url.path, body))
                    code, answer, headers = fake._route(method, url.path, url.query, body, self)
                if code == 204:
                    self.send_response(204)
                    self.end_headers()
                else:
                    self._reply(code, answer, headers)

            def _read_body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if "json" in (self.headers.get("Content-Type") or ""):
                    return json.loads(raw or b"{}")
                return {k: v[0] for k, v in parse_qs(raw.decode()).items()}

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self._serve(Handler)

    @property
    def api_url(self) -> str:
        return self.origin + GITLAB_PREFIX

    @property
    def server_url(self) -> str:
        return self.origin + GITLAB_PREFIX.removesuffix("/api/v4")

    def _route(
        self, method: str, path: str, query: str, body: Any, handler: JsonAPIHandler
    ) -> tuple[int, Any, dict[str, str]]:
        if method == "DELETE" and path == f"{GITLAB_PREFIX}/runners":
            # the runner deletes itself with its own glrt- token (no admin token)
            token = (body or {}).get("token")
            found = [r for r in self.runners.values() if r.credential == token]
            if not found:
                return 403, {"message": "403 Forbidden"}, {}
            del self.runners[found[0].id]
            return 204, None, {}
        private = handler.headers.get("PRIVATE-TOKEN", "")
        if handler.headers.get("JOB-TOKEN") == self.job_token or private == self.job_token:
            return 403, {"message": "403 Forbidden"}, {}
        if private != self.token:
            return 401, {"message": "401 Unauthorized"}, {}
        if method == "POST" and path == f"{GITLAB_PREFIX}/user/runners":
            return self._create(body)
        if (m := _GL_PROJECT_RUNNERS.match(path)) and method == "GET":
            mine = [
                {"id": r.id, "description": r.name, "status": r.status, "active": True}
                for r in self.runners.values()
                if r.scope == f"projects/{m['project']}"
            ]
            page = int(parse_qs(query).get("page", ["1"])[0])
            size = self.page_size
            headers = {}
            if page * size < len(mine):
                nxt = f"{self.origin}{path}?page={page + 1}&per_page={size}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            return 200, mine[(page - 1) * size : page * size], headers
        if (m := _GL_ONE.match(path)) and method == "DELETE":
            if self.runners.pop(int(m["id"]), None) is None:
                return 404, {"message": "404 Runner Not Found"}, {}
            return 204, None, {}
        return 404, {"message": "404 Not found"}, {}

    def _create(self, body: Any) -> tuple[int, Any, dict[str, str]]:
        if not isinstance(body, dict):
            return 400, {"error": "body is not an object"}, {}
        kind = body.get("runner_type")
        if kind not in ("instance_type", "group_type", "project_type"):
            return 400, {"error": "runner_type does not have a valid value"}, {}
        project = body.get("project_id")
        if kind == "project_type" and not project:
            return 400, {"message": "400 Bad request - project_id is missing"}, {}
        tags = body.get("tag_list") or ""
        labels = tags if isinstance(tags, list) else [t for t in str(tags).split(",") if t]
        token = "glrt-" + secrets.token_urlsafe(20)
        runner = Runner(
            self._new_id(), str(body.get("description") or ""), f"projects/{project}", labels, token
        )
        runner.status = "never_contacted"
        runner.run_untagged = body.get("run_untagged")
        self.runners[runner.id] = runner
        self.credentials.append(token)
        return 201, {"id": runner.id, "token": token, "token_expires_at": None}, {}
