"""The one fake GitHub REST API every test folder uses, on 127.0.0.1, written from GitHub's REST
description (docs.github.com/rest) and refusing what GitHub refuses.

Served under ``/api/v3`` as GitHub Enterprise Server does (GraphQL at ``/api/graphql``), so a
client that drops ``GITHUB_API_URL``'s path fails here. Every call needs a bearer token and
``X-GitHub-Api-Version`` (GitHub would default a missing one: required here so a client that
stops pinning its version is caught). Two tokens: ``github_token`` (an admin's, may do
everything) and ``job_token`` (the job's installation token: it may comment, but ``GET
/user`` and the runner routes answer 403 "Resource not accessible by integration"). Lists are
paged by ``page_size`` with an absolute ``Link: rel="next"``.

- Issue comments: ``GET|POST /repos/o/r/issues/N/comments``, ``PATCH .../issues/comments/ID``;
  ``GET /user`` and GraphQL's ``viewer`` name the token's account (``me``, id BOT_ID).
- Self-hosted runners under ``/repos/o/r``, ``/orgs/o`` and ``/enterprises/e``: list, get,
  delete (422 while it runs a job), ``generate-jitconfig`` (``name``; 1 to 100 ``labels``;
  a ``runner_group_id`` that exists in that scope, else 404; ``work_folder``; 409 for a name
  taken), and labels: ``DELETE .../labels/NAME`` (404 absent, 422 read-only) and ``POST
  .../labels`` (422 unless a non-empty list of strings, or past 100). Label names compare
  case-insensitively. A runner is listed only in its own scope.
- ``GET /repos/actions/runner/releases``: actions/runner's releases, newest first, with the
  sha256 lines its release workflow writes and each asset's ``digest``.

Hostile options: ``answers`` (a canned answer for a method and path), ``next_link`` (every
comment page links there), ``answer_first`` (answers given first, in order), and
``lose_answers`` (a comment or a runner is made, and the answer is a 502).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from forges.forge_base import GH, ForgeRoutes, ForgeServer, ForgeState, Runner, token
from gpuci_testing import clean_env

BOT_ID = 41898282  # the token's own account (github-actions[bot]'s id on github.com)
MAX_LABELS = 100  # GitHub: at most 100 labels per runner
DEFAULT_GROUP = 1  # every repository, organisation and enterprise has the Default group
_SCOPE = r"(/repos/[^/]+/[^/]+|/orgs/[^/]+|/enterprises/[^/]+)"
_INTEGRATION = "Resource not accessible by integration"
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


def account(login: str, me: str = "bot") -> dict[str, Any]:
    """A comment's ``user``: the token's account has BOT_ID, everyone else another id."""
    return {"login": login, "id": BOT_ID if login == me else 1000 + len(login)}


@dataclass
class GitHubState(ForgeState):
    github_token: str = field(default_factory=lambda: token("github_pat_"))
    job_token: str = field(default_factory=lambda: token("ghs_job"))
    me: str = "bot"  # the login GET /user (or GraphQL viewer) names for the token
    graphql_viewer: bool = True  # GraphQL names the viewer (else 403)
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "repo#n" -> list
    next_comment: int = 1000
    # ``GET /repos/{owner}/{repo}/commits/{ref}``: "owner/repo@ref" -> the commit's sha
    commits: dict[str, str] = field(default_factory=dict)
    # runner groups by scope ("/orgs/o" -> ids); a scope not named here has the Default only
    groups: dict[str, set[int]] = field(default_factory=dict)
    releases: list[dict[str, Any]] = field(
        default_factory=lambda: [release(*NEWEST_KNOWN, "2026-10-01T12:00:00Z")]
    )
    # Answered first, in order, before any check: a status, or (status, headers, body), the
    # body JSON or raw bytes (rate limits, hostile bodies)
    answer_first: list[Any] = field(default_factory=list)
    # (method, full path) -> (status, JSON body, headers): answered instead of the real thing
    answers: dict[tuple[str, str], tuple[int, Any, dict[str, str]]] = field(default_factory=dict)

    def comment(self, repo: str, number: int, body: str, user: str = "someone") -> dict[str, Any]:
        self.next_comment += 1
        made = {
            "id": self.next_comment,
            "body": body,
            "user": account(user, self.me),
            "html_url": f"https://github.example/{repo}/pull/{number}#issuecomment-{self.next_comment}",
        }
        self.comments.setdefault(f"{repo}#{number}", []).append(made)
        return made


class GitHubRoutes(ForgeRoutes):
    state: GitHubState

    def _github(self, method: str, path: str, query: str, body: Any) -> None:
        st = self.state
        if st.answer_first:
            first = st.answer_first.pop(0)
            if isinstance(first, int):
                return self._reply(first, {"message": f"forced {first}"})
            return self._reply(first[0], first[2], first[1])
        auth = self.headers.get("Authorization", "")
        if auth not in (f"Bearer {st.github_token}", f"Bearer {st.job_token}"):
            return self._reply(401, {"message": "Bad credentials"})
        if self.headers.get("X-GitHub-Api-Version") is None:
            return self._reply(400, {"message": "missing X-GitHub-Api-Version"})
        full = path if path == "/api/graphql" else GH + path
        if (method, full) in st.answers:
            return self._reply(*st.answers[(method, full)])
        job = auth == f"Bearer {st.job_token}"
        if path == "/user" and method == "GET":
            if job:
                return self._reply(403, {"message": _INTEGRATION})
            return self._reply(200, {**account(st.me, st.me), "type": "User"})
        if path == "/api/graphql" and method == "POST":
            if not st.graphql_viewer:
                return self._reply(403, {"message": _INTEGRATION})
            me = account(st.me, st.me)
            return self._reply(
                200, {"data": {"viewer": {"login": me["login"], "databaseId": me["id"]}}}
            )
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", path):
            return self._comments(method, m[1], int(m[2]), query, body)
        if (
            m := re.fullmatch(r"/repos/[^/]+/[^/]+/issues/comments/(\d+)", path)
        ) and method == "PATCH":
            for made in (c for lst in st.comments.values() for c in lst):
                if made["id"] == int(m[1]):
                    made["body"] = body["body"]
                    return self._reply(200, made)
        if path == "/repos/actions/runner/releases" and method == "GET":
            return self._reply(200, st.releases[:100])
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/(.+)", path)) and method == "GET":
            sha = st.commits.get(f"{m[1]}@{m[2]}")
            if sha is None:  # GitHub's answer for a ref it does not have
                return self._reply(422, {"message": f"No commit found for SHA: {m[2]}"})
            return self._reply(200, {"sha": sha, "commit": {"message": "x"}})
        if path.startswith(("/repos/", "/orgs/", "/enterprises/")) and "/actions/runners" in path:
            if job:  # the job's token may not administer runners
                return self._reply(403, {"message": _INTEGRATION})
            return self._runners(method, path, query, body)
        return self._reply(404, {"message": "Not Found"})

    def _comments(self, method: str, repo: str, number: int, query: str, body: Any) -> None:
        st = self.state
        if method == "GET":
            items = st.comments.get(f"{repo}#{number}", [])
            return self._paged(items, query, st.page_size, link=st.next_link)
        if method != "POST":
            return self._reply(405, {"message": "method"})
        made = st.comment(repo, number, body["body"], st.me)
        if st.lost():
            return self._reply(502, {"message": "lost after the write"})
        return self._reply(201, made)

    # ----- self-hosted runners --------------------------------------------------------------
    def _runners(self, method: str, path: str, query: str, body: Any) -> None:
        st = self.state
        if m := re.fullmatch(rf"{_SCOPE}/actions/runners/generate-jitconfig", path):
            return (
                self._jit(m[1], body)
                if method == "POST"
                else self._reply(405, {"message": "method"})
            )
        if (m := re.fullmatch(rf"{_SCOPE}/actions/runners", path)) and method == "GET":
            items = [_listed(r, r.status) for r in st.runners.values() if r.scope == m[1]]
            return self._paged(items, query, st.page_size, key="runners")
        m = re.fullmatch(rf"{_SCOPE}/actions/runners/(\d+)(/labels(?:/([^/]+))?)?", path)
        found = st.runners.get(int(m[2])) if m else None
        if m is None or found is None or found.scope != m[1]:
            return self._reply(404, {"message": "Not Found"})
        if m[3] is None:
            return self._one(method, found)
        if method == "DELETE" and m[4]:
            return self._unlabel(found, unquote(m[4]))
        if method == "POST" and not m[4]:
            return self._label(found, body)
        return self._reply(404, {"message": "Not Found"})

    def _one(self, method: str, found: Runner) -> None:
        if method == "GET":
            return self._reply(200, _listed(found, self.state.read_status(found)))
        if method != "DELETE":
            return self._reply(404, {"message": "Not Found"})
        if found.busy:  # as GitHub answers for a runner in the middle of a job
            return self._reply(
                422, {"message": f'Bad request - Runner "{found.name}" is still running a job"'}
            )
        del self.state.runners[found.id]
        return self._reply(204, {})

    def _jit(self, scope: str, body: Any) -> None:
        st = self.state
        problems = _jit_problems(body)
        if problems:
            return self._reply(422, {"message": "; ".join(problems)})
        group = body["runner_group_id"]
        if group not in st.groups.get(scope, {DEFAULT_GROUP}):
            return self._reply(404, {"message": f"No runner group found with identifier {group}."})
        if body["name"] in st.names():
            return self._reply(409, {"message": "Already exists - A runner with this name"})
        st.next_id += 1
        runner = Runner(st.next_id, body["name"], list(body["labels"]), scope)
        st.runners[runner.id] = runner
        config = "JIT" + secrets.token_urlsafe(24)
        st.issued.append(config)
        if st.lost():
            return self._reply(502, {"message": "Bad gateway"})
        made = {"id": runner.id, "name": runner.name, "status": "offline"}
        return self._reply(201, {"runner": made, "encoded_jit_config": config})

    def _unlabel(self, runner: Runner, name: str) -> None:
        have = next((lb for lb in runner.labels if lb.lower() == name.lower()), None)
        if have is None:
            return self._reply(404, {"message": "Not Found"})
        if have.lower() in runner.read_only:
            return self._reply(422, {"message": "Validation Failed: read-only label"})
        runner.labels.remove(have)
        return self._labels(runner)

    def _label(self, runner: Runner, body: Any) -> None:
        labels = body.get("labels") if isinstance(body, dict) else None
        if (
            not isinstance(labels, list)
            or not labels
            or not all(isinstance(x, str) and x for x in labels)
        ):
            return self._reply(422, {"message": "Validation Failed: labels"})
        have = {n.lower() for n in runner.labels}
        if len(have | {n.lower() for n in labels}) > MAX_LABELS:
            return self._reply(422, {"message": f"Validation Failed: at most {MAX_LABELS} labels"})
        for name in labels:
            if name.lower() not in have:  # case-insensitive: GPU-large is gpu-large
                runner.labels.append(name)
                have.add(name.lower())
        return self._labels(runner)

    def _labels(self, runner: Runner) -> None:
        self._reply(200, {"total_count": len(runner.labels), "labels": _label_objects(runner)})


def _label_objects(runner: Runner) -> list[dict[str, Any]]:
    return [
        {
            "id": 1000 + i,
            "name": n,
            "type": "read-only" if n.lower() in runner.read_only else "custom",
        }
        for i, n in enumerate(runner.labels)
    ]


def _listed(runner: Runner, status: str) -> dict[str, Any]:
    return {
        "id": runner.id,
        "name": runner.name,
        "os": "linux",
        "status": status,
        "busy": runner.busy,
        "labels": _label_objects(runner),
    }


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
    group = body.get("runner_group_id")
    if isinstance(group, bool) or not isinstance(group, int):
        out.append("runner_group_id must be an integer")
    if not isinstance(body.get("work_folder"), str):
        out.append("work_folder must be a string")
    return out


class FakeGitHub(ForgeServer):
    handler = GitHubRoutes
    state_class = GitHubState
    state: GitHubState

    @property
    def github_api(self) -> str:
        return self.base + GH

    def github_env(self, **extra: str) -> dict[str, str]:
        """A job's variables for gpu-ci's runner commands (pods, quarantine) against this fake."""
        return {
            "GPUCI_RUNNER_TOKEN": self.state.github_token,
            "GITHUB_API_URL": self.github_api,
            "GITHUB_REPOSITORY": "octo/gpu",
            **extra,
        }

    def pull_request_env(self, tmp_path: Path, repo: str, pr: int, **extra: str) -> dict[str, str]:
        """A pull-request job in GitHub Actions whose API is this fake: an event file naming PR
        ``pr``, empty output and summary files under ``tmp_path``, the admin token."""
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": pr}}))
        for name in ("out", "summary"):
            (tmp_path / name).write_text("")
        env = {
            "GITHUB_ACTIONS": "true",
            "GITHUB_OUTPUT": str(tmp_path / "out"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": repo,
            "GITHUB_API_URL": self.github_api,
            "GITHUB_TOKEN": self.state.github_token,
            "GITHUB_SHA": "c" * 40,
            "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        }
        return clean_env(**{**env, **extra})

    def secrets(self) -> list[str]:
        return [self.state.github_token, self.state.job_token]
