"""What the fake GitHub (fake_github.py) and the fake GitLab (fake_gitlab.py) share: a runner's
record, the state both keep (runners, requests, the files a pod downloads), and the routing.

Each fake is written from its service's REST description and refuses what the service refuses;
``FakeForges`` (fake_forges.py) mounts both on one port for tests that run either platform.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from loopback_http import RoutedAPIHandler, StatefulAPIServer

GH = "/api/v3"  # GitHub under a path, as GitHub Enterprise Server serves it
GL = "/gitlab/api/v4"  # a self-managed GitLab behind a path
# The labels actions/runner reports itself: read-only on GitHub.
SYSTEM_LABELS = ("self-hosted", "Linux", "X64")


@dataclass
class Runner:
    """A runner on either forge: ``scope`` is GitHub's ``/repos/o/r``, ``/orgs/o`` or
    ``/enterprises/e``, or GitLab's ``project:ID``, ``group:ID`` or ``instance``."""

    id: int
    name: str
    labels: list[str]  # GitHub's labels, GitLab's tags
    scope: str
    read_only: set[str] = field(default_factory=set)  # GitHub: labels the runner reports
    projects: list[str] = field(default_factory=list)  # GitLab: a project runner's projects
    token: str = ""  # GitLab's glrt- token
    status: str = "offline"
    busy: bool = False  # running a job: GitHub refuses to delete it (422)
    paused: bool = False
    reads: int = 0  # status reads so far

    def names(self) -> list[str]:
        return list(self.labels)


@dataclass
class ForgeState:
    page_size: int = 2
    runners: dict[int, Runner] = field(default_factory=dict)
    # (method, path with its query, body): every request, in order
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # served by path, without auth
    issued: list[str] = field(default_factory=list)  # every credential handed out
    next_id: int = 100
    lose_answers: int = 0  # creations that make the thing, then answer 502 (the answer lost)
    # A registered runner is listed offline until its listener connects: here, after this
    # many reads of its status (None: never, a pod that never starts its runner).
    online_after_reads: int | None = 0
    on_status_read: Any = None  # called with the Runner before each status read (tests)
    next_link: str | None = None  # hostile: a Link rel="next" put on every comment/note page

    def add(self, name: str, scope: str, labels: list[str] | None = None) -> Runner:
        """A runner someone configured by hand: on GitHub it also reports SYSTEM_LABELS."""
        self.next_id += 1
        if scope.startswith("/"):
            runner = Runner(self.next_id, name, [*SYSTEM_LABELS, *(labels or [])], scope)
            runner.read_only = {lb.lower() for lb in SYSTEM_LABELS}
        else:
            runner = Runner(self.next_id, name, list(labels or []), scope)
            if scope.startswith("project:"):
                runner.projects = [scope.partition(":")[2]]
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

    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]

    def lost(self) -> bool:
        """Whether this answer is lost (``lose_answers``), counting it down."""
        if self.lose_answers > 0:
            self.lose_answers -= 1
            return True
        return False


def token(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class ForgeRoutes(RoutedAPIHandler):
    """Files without auth, then ``/api/v3`` to ``_github``, ``/gitlab/api/v4`` to ``_gitlab``
    (each fake overrides its own; a path of the other forge is 404 there)."""

    state: ForgeState

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        if method == "GET" and url.path in self.state.files:
            data = self.state.files[url.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = self._form_or_json() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        self.state.requests.append((method, self.path, body))
        if url.path.startswith(GH) or url.path == "/api/graphql":
            return self._github(method, url.path.removeprefix(GH), url.query, body)
        if url.path.startswith(GL):
            return self._gitlab(method, url.path[len(GL) :], url.query, body)
        return self._reply(404, {"message": "Not Found"})

    def _github(self, method: str, path: str, query: str, body: Any) -> None:
        self._reply(404, {"message": "Not Found"})

    def _gitlab(self, method: str, path: str, query: str, body: Any) -> None:
        self._reply(404, {"message": "404 Not found"})


class ForgeServer(StatefulAPIServer):
    """A fake forge: ``handler`` and ``state_class`` name which; ``**state`` sets its fields."""

    handler: type[ForgeRoutes] = ForgeRoutes
    state_class: type[ForgeState] = ForgeState

    def __init__(self, **state: Any) -> None:
        super().__init__(self.handler, self.state_class(**state))
