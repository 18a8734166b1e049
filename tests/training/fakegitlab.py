"""A small fake of the GitLab REST API v4 (merge request notes) on 127.0.0.1.

It serves under ``/gitlab/api/v4``, as a self-managed GitLab behind a path does, so a client
that drops ``CI_API_V4_URL``'s path fails here. Pages hold at most ``page_size`` notes and link
the next one with an absolute ``Link`` header, as GitLab does. ``PRIVATE-TOKEN`` must be the
project access token; the CI job token (``JOB-TOKEN``, or that value as a private token) gets
403 on notes, as on GitLab. ``GET /user`` names the token's bot user.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from loopback_http import JsonAPIHandler

PREFIX = "/gitlab/api/v4"
_LIST = re.compile(rf"^{PREFIX}/projects/([^/]+)/merge_requests/(\d+)/notes$")
_ONE = re.compile(rf"^{PREFIX}/projects/([^/]+)/merge_requests/(\d+)/notes/(\d+)$")
BOT_ID = 77  # the project access token's bot user


@dataclass
class State:
    token: str
    job_token: str = "job-token-value"
    page_size: int = 2
    notes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "project!iid" -> list
    requests: list[tuple[str, str]] = field(default_factory=list)
    next_link: str | None = None  # a Link rel="next" put on every notes page (hostile tests)
    next_id: int = 500
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, project: str, iid: int, body: str, author_id: int = 5) -> dict[str, Any]:
        with self.lock:
            self.next_id += 1
            note = {
                "id": self.next_id,
                "body": body,
                "system": False,
                "author": {"id": author_id, "username": f"user{author_id}"},
            }
            self.notes.setdefault(f"{project}!{iid}", []).append(note)
            return note


class _Handler(JsonAPIHandler):
    state: State
    base: str

    def _auth(self) -> str:
        """``ok``, ``job`` (the job token: may read, never write notes) or ``bad``."""
        private = self.headers.get("PRIVATE-TOKEN", "")
        if private == self.state.token:
            return "ok"
        if self.headers.get("JOB-TOKEN") == self.state.job_token or private == self.state.job_token:
            return "job"
        return "bad"

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        self.state.requests.append((method, self.path))
        who = self._auth()
        if who == "bad":
            return self._reply(401, {"message": "401 Unauthorized"})
        if who == "job":
            return self._reply(403, {"message": "403 Forbidden"})
        if method == "GET" and url.path == f"{PREFIX}/user":
            return self._reply(200, {"id": BOT_ID, "username": "project_9_bot_abc"})
        if match := _LIST.match(url.path):
            key = f"{match[1]}!{match[2]}"
            if method == "GET":
                page = int(parse_qs(url.query).get("page", ["1"])[0])
                notes = self.state.notes.get(key, [])
                size = self.state.page_size
                chunk = notes[(page - 1) * size : page * size]
                headers = {}
                if self.state.next_link:
                    headers["Link"] = f'<{self.state.next_link}>; rel="next"'
                elif page * size < len(notes):
                    nxt = f"{self.base}{url.path}?page={page + 1}&per_page={size}"
                    headers["Link"] = f'<{nxt}>; rel="next"'
                return self._reply(200, chunk, headers)
            if method == "POST":
                note = self.state.add(match[1], int(match[2]), self._body()["body"], BOT_ID)
                return self._reply(201, note)
        if (match := _ONE.match(url.path)) and method == "PUT":
            for note in self.state.notes.get(f"{match[1]}!{match[2]}", []):
                if note["id"] == int(match[3]):
                    note["body"] = self._body()["body"]
                    return self._reply(200, note)
        return self._reply(404, {"message": "404 Not found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")


class FakeGitLab:
    def __init__(self, token: str = "glpat-project-token-1234") -> None:
        self.state = State(token=token)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        host, port = self._server.server_address[:2]
        self.origin = f"http://{host}:{port}"
        handler.base = self.origin
        self.api_url = f"{self.origin}{PREFIX}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGitLab:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
