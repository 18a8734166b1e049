"""The one fake GitLab REST API v4 every test folder uses, on 127.0.0.1, written from GitLab's
API docs (docs.gitlab.com/api: notes, runners, users) and refusing what GitLab refuses.

Served under ``/gitlab/api/v4``, as a self-managed GitLab behind a path, so a client that drops
``CI_API_V4_URL``'s path fails here. ``PRIVATE-TOKEN`` must be ``gitlab_token`` (a project or
group access token whose bot user is BOT_ID), holding ``gitlab_scopes``; the CI job token
(``ci_job_token``, as ``JOB-TOKEN`` or as a private token) gets 403. Lists are paged by
``page_size`` with an absolute ``Link: rel="next"``.

- Merge request notes: ``GET|POST /projects/:id/merge_requests/:iid/notes`` (newest first
  unless ``sort=asc``, as GitLab sorts them), ``PUT .../notes/:note_id``; ``GET /user``.
- Runners: ``POST /user/runners`` (``project_type`` with ``project_id``, ``tag_list``,
  ``run_untagged=false``; answers ``id`` and a ``glrt-`` token; Maintainer on the project),
  ``GET /projects/:id/runners`` (the project's own runners, its groups' runners and the
  instance runners, as GitLab lists them; ``type`` filters), ``GET /runners/:id``, ``PUT
  /runners/:id`` (``paused``), ``DELETE /runners/:id`` and ``DELETE /runners`` with the
  runner's own ``token``.
- Roles, as GitLab checks them: managing a project runner needs Maintainer (or Owner) on one
  of its projects, a group runner Owner of its group, an instance runner an administrator.
  Deleting a project runner assigned to more than one project is 403 unless by an admin.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from forges.forge_base import GL, ForgeRoutes, ForgeServer, ForgeState, Runner, token

BOT_ID = 77  # the access token's bot user
_RANK = {"guest": 10, "reporter": 20, "developer": 30, "maintainer": 40, "owner": 50}
_TYPES = {"project": "project_type", "group": "group_type", "instance": "instance_type"}


@dataclass
class GitLabState(ForgeState):
    gitlab_token: str = field(default_factory=lambda: "glpat-" + secrets.token_hex(10))
    ci_job_token: str = field(default_factory=lambda: token("glcbt-"))
    # The token's scopes: create_runner makes runners only; reading and deleting them needs
    # api (or read_api to read), as GitLab checks.
    gitlab_scopes: set[str] = field(default_factory=lambda: {"create_runner", "api"})
    # The token user's role by namespace ("project:42", "group:7"); others get default_role.
    roles: dict[str, str] = field(default_factory=dict)
    default_role: str = "maintainer"
    admin: bool = False
    project_groups: dict[str, list[str]] = field(default_factory=lambda: {"42": ["7"]})
    notes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "project!iid" -> list
    next_note: int = 500

    def note(self, project: str, iid: int, body: str, author_id: int = 5) -> dict[str, Any]:
        self.next_note += 1
        made = {
            "id": self.next_note,
            "body": body,
            "system": False,
            "author": {"id": author_id, "username": f"user{author_id}"},
        }
        self.notes.setdefault(f"{project}!{iid}", []).append(made)
        return made

    def role(self, namespace: str) -> int:
        return _RANK[self.roles.get(namespace, self.default_role)]

    def may_manage(self, runner: Runner) -> bool:
        """Whether the token's user may update or delete ``runner`` (GitLab's runner policy)."""
        if self.admin:
            return True
        if runner.scope.startswith("group:"):
            return self.role(runner.scope) >= _RANK["owner"]
        if runner.scope.startswith("project:"):
            return any(self.role(f"project:{p}") >= _RANK["maintainer"] for p in runner.projects)
        return False  # an instance runner: administrators only


class GitLabRoutes(ForgeRoutes):
    state: GitLabState

    def _gitlab(self, method: str, path: str, query: str, body: Any) -> None:
        st = self.state
        if path == "/runners" and method == "DELETE":  # the runner deletes itself
            mine = [
                r for r in st.runners.values() if r.token and r.token == (body or {}).get("token")
            ]
            if not mine:
                return self._reply(403, {"message": "403 Forbidden"})
            del st.runners[mine[0].id]
            return self._reply(204, {})
        private = self.headers.get("PRIVATE-TOKEN", "")
        if st.ci_job_token in (private, self.headers.get("JOB-TOKEN")):
            return self._reply(403, {"message": "403 Forbidden"})
        if private != st.gitlab_token:
            return self._reply(401, {"message": "401 Unauthorized"})
        need = {"create_runner", "api"} if path == "/user/runners" else {"api"}
        if method == "GET" and path != "/user/runners":
            need = {"api", "read_api"}
        if not need & st.gitlab_scopes:
            return self._reply(
                403,
                {
                    "error": "insufficient_scope",
                    "error_description": "The request requires higher privileges than "
                    "provided by the access token.",
                    "scope": " ".join(sorted(need)),
                },
            )
        if method == "GET" and path == "/user":
            return self._reply(200, {"id": BOT_ID, "username": "project_9_bot_abc"})
        if m := re.fullmatch(r"/projects/([^/]+)/merge_requests/(\d+)/notes(?:/(\d+))?", path):
            return self._notes(method, f"{m[1]}!{m[2]}", m[3], query, body)
        if path == "/user/runners" and method == "POST":
            return self._register(body)
        if m := re.fullmatch(r"/projects/([^/]+)/runners", path):
            return self._project_runners(m[1], query)
        if m := re.fullmatch(r"/runners/(\d+)", path):
            return self._runner(method, st.runners.get(int(m[1])), body)
        return self._reply(404, {"message": "404 Not found"})

    def _notes(self, method: str, key: str, note_id: str | None, query: str, body: Any) -> None:
        st = self.state
        notes = st.notes.get(key, [])
        if method == "GET" and note_id is None:
            asked = parse_qs(query)
            newest_first = asked.get("sort", ["desc"])[0] != "asc"  # GitLab's default: desc
            ordered = list(reversed(notes)) if newest_first else notes
            return self._paged(ordered, query, st.page_size, link=st.next_link)
        if method == "POST" and note_id is None:
            return self._reply(201, st.note(*_split(key), body["body"], BOT_ID))
        if method == "PUT" and note_id is not None:
            for made in notes:
                if made["id"] == int(note_id):
                    made["body"] = body["body"]
                    return self._reply(200, made)
        return self._reply(404, {"message": "404 Not found"})

    def _register(self, body: Any) -> None:
        st = self.state
        problems = _register_problems(body)
        if problems:
            return self._reply(400, {"message": "; ".join(problems)})
        project = str(body["project_id"])
        if st.role(f"project:{project}") < _RANK["maintainer"] and not st.admin:
            return self._reply(403, {"message": "403 Forbidden"})
        runner = st.add(body["description"], f"project:{project}", body["tag_list"].split(","))
        runner.token = "glrt-" + secrets.token_urlsafe(20)
        st.issued.append(runner.token)
        if st.lost():
            return self._reply(502, {"message": "502 Bad Gateway"})
        return self._reply(201, {"id": runner.id, "token": runner.token, "token_expires_at": None})

    def _project_runners(self, project: str, query: str) -> None:
        st = self.state
        if st.role(f"project:{project}") < _RANK["maintainer"] and not st.admin:
            return self._reply(403, {"message": "403 Forbidden"})
        groups = {f"group:{g}" for g in st.project_groups.get(project, [])}
        kind = parse_qs(query).get("type", [""])[0]
        items = [
            _listed(r, r.status)
            for r in st.runners.values()
            if (project in r.projects or r.scope in groups or r.scope == "instance")
            and kind in ("", _TYPES[r.scope.partition(":")[0]])
        ]
        return self._paged(items, query, st.page_size)

    def _runner(self, method: str, found: Runner | None, body: Any) -> None:
        st = self.state
        if found is None or found.scope.startswith("/"):
            return self._reply(404, {"message": "404 Not found"})
        if method == "GET":
            return self._reply(200, _listed(found, st.read_status(found)))
        if not st.may_manage(found):
            return self._reply(403, {"message": "403 Forbidden"})
        if method == "PUT":
            paused = body.get("paused") if isinstance(body, dict) else None
            if paused not in (True, False, "true", "false"):
                return self._reply(400, {"error": "paused is invalid"})
            found.paused = paused in (True, "true")
            return self._reply(200, _listed(found, found.status))
        if method == "DELETE":
            if len(found.projects) > 1 and not st.admin:
                return self._reply(
                    403, {"message": "403 Forbidden - Runner associated with more than one project"}
                )
            del st.runners[found.id]
            return self._reply(204, {})
        return self._reply(405, {"message": "405 Method Not Allowed"})


def _split(key: str) -> tuple[str, int]:
    project, _, iid = key.partition("!")
    return project, int(iid)


def _listed(runner: Runner, status: str) -> dict[str, Any]:
    kind = _TYPES[runner.scope.partition(":")[0]]
    return {
        "id": runner.id,
        "description": runner.name,
        "status": status,
        "paused": runner.paused,
        "active": not runner.paused,
        "is_shared": kind == "instance_type",
        "runner_type": kind,
        "tag_list": list(runner.labels),
    }


def _register_problems(body: Any) -> list[str]:
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


class FakeGitLab(ForgeServer):
    handler = GitLabRoutes
    state_class = GitLabState
    state: GitLabState

    @property
    def gitlab_api(self) -> str:
        return self.base + GL

    def gitlab_env(self, **extra: str) -> dict[str, str]:
        """A GitLab CI job's variables for gpu-ci's runner commands against this fake."""
        return {
            "GPUCI_GITLAB_TOKEN": self.state.gitlab_token,
            "CI_API_V4_URL": self.gitlab_api,
            "CI_SERVER_URL": self.base + "/gitlab",
            "CI_PROJECT_ID": "42",
            **extra,
        }

    def secrets(self) -> list[str]:
        return [self.state.gitlab_token, self.state.ci_job_token]
