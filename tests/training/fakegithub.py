"""A small fake of the GitHub REST API (issue comments) on 127.0.0.1, for the report tests.

It serves under ``/api/v3`` as GitHub Enterprise Server does, so a client that drops the base
path fails here. Pages hold at most ``page_size`` comments and link the next page with an
absolute ``Link`` header, as GitHub does; it checks the bearer token and can be told to fail.
``GET /user`` names the token's account (``me``); with ``user_forbidden`` it answers 403 as
for an installation token, whose account GraphQL's ``viewer`` names (``/api/graphql``).
Hostile answers (tests/security/hostile_github.py) plug in through ``answers`` and
``next_link``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from gpuci_testing import clean_env
from loopback_http import JsonAPIHandler

PREFIX = "/api/v3"
_LIST = re.compile(rf"^{PREFIX}/repos/([^/]+/[^/]+)/issues/(\d+)/comments$")
_ONE = re.compile(rf"^{PREFIX}/repos/([^/]+/[^/]+)/issues/comments/(\d+)$")
BOT_ID = 41898282  # the token's own account (github-actions[bot]'s id on github.com)


def account(login: str, me: str = "bot") -> dict[str, Any]:
    """A comment's ``user``: the token's account has BOT_ID, everyone else another id."""
    return {"login": login, "id": BOT_ID if login == me else 1000 + len(login)}


@dataclass
class State:
    token: str
    page_size: int = 2
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "repo#n" -> list
    requests: list[tuple[str, str]] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)  # status codes to answer, in order
    lose_create_responses: int = 0  # create the comment, then answer 502 (a lost response)
    next_id: int = 1000
    me: str = "bot"  # the login GET /user (or GraphQL viewer) names for the token
    user_forbidden: bool = False  # GET /user answers 403, as for an installation token
    graphql_viewer: bool = True  # GraphQL names the viewer (else 403)
    # (method, path) -> (status, JSON body, headers): answered instead of the real thing
    answers: dict[tuple[str, str], tuple[int, Any, dict[str, str]]] = field(default_factory=dict)
    next_link: str | None = None  # a Link rel="next" put on every comment list page
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, number: int, body: str, user: str = "someone") -> dict[str, Any]:
        with self.lock:
            self.next_id += 1
            comment = {
                "id": self.next_id,
                "body": body,
                "user": account(user, self.me),
                "html_url": f"https://github.example/{repo}/pull/{number}#issuecomment-{self.next_id}",
            }
            self.comments.setdefault(f"{repo}#{number}", []).append(comment)
            return comment


class FakeGitHub:
    def __init__(self, token: str = "ghs_faketoken123456") -> None:
        self.state = State(token=token)
        state = self.state

        class Handler(JsonAPIHandler):
            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                state.requests.append((method, self.path))
                if state.fail_next:
                    code = state.fail_next.pop(0)
                    self._reply(code, {"message": f"forced {code}"})
                    return
                if self.headers.get("Authorization") != f"Bearer {state.token}":
                    self._reply(401, {"message": "Bad credentials"})
                    return
                if self.headers.get("X-GitHub-Api-Version") is None:
                    self._reply(400, {"message": "missing X-GitHub-Api-Version"})
                    return
                if (method, url.path) in state.answers:
                    self._reply(*state.answers[(method, url.path)])
                    return
                if url.path == f"{PREFIX}/user" and method == "GET":
                    if state.user_forbidden:
                        self._reply(403, {"message": "Resource not accessible by integration"})
                    else:
                        self._reply(200, {**account(state.me, state.me), "type": "User"})
                    return
                if url.path == "/api/graphql" and method == "POST":
                    if not state.graphql_viewer:
                        self._reply(403, {"message": "Resource not accessible by integration"})
                        return
                    me = account(state.me, state.me)
                    viewer = {"login": me["login"], "databaseId": me["id"]}
                    self._reply(200, {"data": {"viewer": viewer}})
                    return
                if m := _LIST.match(url.path):
                    key = f"{m.group(1)}#{m.group(2)}"
                    if method == "GET":
                        self._list(key, parse_qs(url.query))
                    elif method == "POST":
                        body = self._body()
                        made = state.add(m.group(1), int(m.group(2)), body["body"], state.me)
                        if state.lose_create_responses > 0:
                            state.lose_create_responses -= 1
                            self._reply(502, {"message": "lost after the write"})
                        else:
                            self._reply(201, made)
                    else:
                        self._reply(405, {"message": "method"})
                    return
                if (m := _ONE.match(url.path)) and method == "PATCH":
                    body = self._body()
                    for comment in (c for lst in state.comments.values() for c in lst):
                        if comment["id"] == int(m.group(2)):
                            comment["body"] = body["body"]
                            self._reply(200, comment)
                            return
                self._reply(404, {"message": "Not Found"})

            def _list(self, key: str, query: dict[str, list[str]]) -> None:
                items = state.comments.get(key, [])
                size = min(int(query.get("per_page", ["30"])[0]), state.page_size)
                page = int(query.get("page", ["1"])[0])
                chunk = items[(page - 1) * size : page * size]
                headers = {}
                if state.next_link is not None:
                    headers["Link"] = f'<{state.next_link}>; rel="next"'
                elif page * size < len(items):
                    host = f"http://127.0.0.1:{self.server.server_address[1]}"
                    path = urlparse(self.path).path
                    headers["Link"] = f'<{host}{path}?per_page={size}&page={page + 1}>; rel="next"'
                self._reply(200, chunk, headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{PREFIX}"

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def pull_request_job_env(
    tmp_path: Path, fake: FakeGitHub, repo: str, pr: int, **extra: str
) -> dict[str, str]:
    """The environment of a pull-request job in GitHub Actions whose API is ``fake``: an event
    file naming PR ``pr``, empty output and summary files under ``tmp_path``, the fake's token."""
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
        "GITHUB_API_URL": fake.api_url,
        "GITHUB_TOKEN": fake.state.token,
        "GITHUB_SHA": "c" * 40,
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
    }
    return clean_env(**{**env, **extra})
