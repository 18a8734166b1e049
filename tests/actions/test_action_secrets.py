"""A secret input is masked before anything could print it (actions/retry-fetch ``headers``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from action_env import run_gpuci_action

from loopback_http import LoopbackHTTPServer

SECRET = "s3cr3t-token-5f2c9a"
BODY = b"weights" * 1000


class _Handler(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # only a caller with the secret gets the file
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != f"Bearer {SECRET}":
            self.send_error(401, "missing token")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    with LoopbackHTTPServer(_Handler) as httpd:
        yield f"http://127.0.0.1:{httpd.port}/model.bin"


@pytest.mark.skipif(
    importlib.util.find_spec("gpuci.fetch") is None, reason="retry-fetch (issue 4) not built yet"
)
def test_secret_header_is_used_but_never_shown(tmp_path: Path, server: str) -> None:
    dest = tmp_path / "model.bin"
    run = run_gpuci_action(
        tmp_path,
        "actions/retry-fetch",
        {"url": server, "dest": str(dest), "headers": f"Authorization: Bearer {SECRET}"},
    )
    assert run.ok, run.log
    assert dest.read_bytes() == BODY
    assert f"Bearer {SECRET}" in _Handler.seen  # it did reach the server, through env
    # The raw stream names the secret only inside ::add-mask:: lines, the first of them
    # before any other output of the step...
    # (the log, masks included, is on stderr; the runner parses both streams; stdout's result
    # comes last)
    raw = run.step("run").stderr + run.step("run").stdout
    lines = raw.splitlines()
    assert lines and lines[0].startswith("::add-mask::"), raw[:500]
    assert all(line.startswith("::add-mask::") for line in lines if SECRET in line)
    # ...so what the runner shows never contains it.
    assert SECRET not in run.log
    assert SECRET not in run.summary
    assert all(SECRET not in value for value in run.outputs.values())
