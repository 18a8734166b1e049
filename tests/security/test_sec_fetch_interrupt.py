"""Ctrl-C stops retry-fetch at once, with nothing renamed into place (a review reproduced it).

The CLI ran every download on a pool thread, so a SIGINT landed in the main thread's wait and
the pool's shutdown waited for the download to finish: the file was fully fetched and renamed
17 s after the Ctrl-C, and the step's outputs were lost. Each test starts the CLI in a
subprocess against a server that would take minutes, sends SIGINT once the download runs, and
asserts the process ended at all within a generous bound, exit 130, no final file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_http import Handler, HostileServer, Route

from gpuci_testing import clean_env

SIZE = 400_000
ENDED_AT_ALL = 60  # seconds; the server below takes about 100 s for one file


def slow_file() -> Route:
    """An honest 200 that sends 2 KB every half second, until the client or the test ends."""

    def route(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(SIZE))
        h.send_header("ETag", '"v1"')
        h.end_headers()
        sent = 0
        while sent < SIZE and not h.server_ref.stop.wait(0.5):
            h.wfile.write(b"x" * 2000)
            h.wfile.flush()
            sent += 2000

    return route


@pytest.fixture
def slow():
    with HostileServer() as srv:
        yield srv


def wait_for_requests(srv: HostileServer, count: int) -> None:
    for _ in range(300):  # 30 s at most
        if len(srv.requests()) >= count:
            return
        time.sleep(0.1)
    pytest.fail(f"the CLI sent {len(srv.requests())} of {count} requests in 30 s")


def interrupted(tmp_path: Path, srv: HostileServer, names: list[str]) -> subprocess.Popen[str]:
    """The CLI fetching ``names``, sent SIGINT once every download has asked its server."""
    args = []
    for name in names:
        args += ["--url", f"{srv.url('/' + name)} - {name}"]
    cmd = [sys.executable, "-m", "gpuci", "retry-fetch", "--max-wait", "1s", *args]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_for_requests(srv, len(names))
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(signal.SIGINT)
    return proc


@pytest.mark.parametrize("count", [1, 3], ids=["one-file", "parallel"])
def test_ctrl_c_stops_the_downloads_and_renames_nothing(slow, tmp_path: Path, count: int):
    names = [f"f{i}.bin" for i in range(count)]
    for name in names:
        slow.route("/" + name, slow_file())
    proc = interrupted(tmp_path, slow, names)
    try:
        out, _ = proc.communicate(timeout=ENDED_AT_ALL)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"retry-fetch still ran {ENDED_AT_ALL}s after Ctrl-C")
    text = out.decode(errors="replace")
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert not [n for n in names if (tmp_path / n).exists()], os.listdir(tmp_path)
