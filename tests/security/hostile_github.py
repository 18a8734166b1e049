"""A hostile GitHub API: the fake of tests/training/fakegithub.py, told to lie, plus a thief.

- :class:`Thief` is another origin (its own port on 127.0.0.1) that records every request and
  the ``Authorization`` it carried: where a ``Link: rel="next"`` or a redirect points.
- :func:`foreign_next_page` links the comment list's next page to the thief.
- :func:`planted_marker` puts the report's marker in a comment by another user (``mallory``).
- :func:`object_where_list` answers a JSON object (or non-JSON) where the comment list belongs.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuci_testing import REPO as SOURCE

sys.path.insert(0, str(SOURCE / "tests" / "training"))
from fakegithub import BOT_ID, PREFIX, FakeGitHub, pull_request_job_env

__all__ = ["BOT_ID", "FakeGitHub"]

REPO = "acme/models"
PR = 7
MARKER = "<!-- gpuci-report:training -->"
LIST = f"{PREFIX}/repos/{REPO}/issues/{PR}/comments"


class Thief:
    """Another origin: answers an empty comment list and keeps what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (method, path, Authorization)
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                data = b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def tokens(self) -> list[str]:
        return [auth for _, _, auth in self.seen if auth]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def foreign_next_page(fake: FakeGitHub, thief: Thief) -> None:
    fake.state.add(REPO, PR, "an ordinary first comment")
    fake.state.next_link = f"{thief.url}{LIST}?per_page=100&page=2"


def planted_marker(fake: FakeGitHub) -> dict[str, Any]:
    """mallory pastes the hidden marker into her own comment, before ours exists."""
    return fake.state.add(REPO, PR, f"{MARKER}\nmallory's words", user="mallory")


def object_where_list(fake: FakeGitHub, body: Any = None) -> None:
    fake.state.answers[("GET", LIST)] = (200, body or {"message": "not a list"}, {})


def report_env(tmp_path: Path, fake: FakeGitHub, **extra: str) -> dict[str, str]:
    """A pull-request job in GitHub Actions talking to ``fake``."""
    return pull_request_job_env(tmp_path, fake, REPO, PR, **extra)
