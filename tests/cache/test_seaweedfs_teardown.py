"""scripts/seaweedfs.py leaves no server behind: not one that ignores SIGTERM, not what a server
that exited left in its process group, not one whose parent died without stopping it.

A stand-in for ``weed`` (it answers S3's port with 403, as weed does an anonymous request, and
ignores SIGTERM) keeps these fast and independent of SeaweedFS being installed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_testing import REPO_ROOT, seaweedfs

FAKE_WEED = """#!{python}
import http.server, os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
flags = dict(arg[1:].split("=", 1) for arg in sys.argv[2:] if "=" in arg)
pids = [os.getpid()]
if os.environ.get("FAKE_WEED_CHILD"):  # leave a child in the group, then fail
    sleeper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    pids.append(subprocess.Popen([sys.executable, "-c", sleeper]).pid)
with open(os.environ["FAKE_WEED_PIDS"] + ".tmp", "w") as out:
    out.write(" ".join(map(str, pids)))
os.rename(os.environ["FAKE_WEED_PIDS"] + ".tmp", os.environ["FAKE_WEED_PIDS"])
if os.environ.get("FAKE_WEED_CHILD"):
    sys.exit(1)

class Forbidden(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(403)
        self.end_headers()

http.server.HTTPServer(("127.0.0.1", int(flags["s3.port"])), Forbidden).serve_forever()
"""


def alive(pid: int) -> bool:
    """Running, not a zombie (a killed orphan stays one where nothing reaps it)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except ProcessLookupError:
        return False
    except FileNotFoundError:  # no /proc (macOS): signal 0 reached it
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ends(pid: int) -> bool:
    """Whether ``pid`` ends within a hang guard's time (an event, not a duration, is checked)."""
    deadline = time.monotonic() + 30
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """(the stand-in's path, the file it writes its pids to); what it started is killed after."""
    weed = tmp_path / "weed"
    weed.write_text(FAKE_WEED.format(python=sys.executable))
    weed.chmod(0o755)
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_WEED_PIDS", str(pids))
    yield str(weed), pids
    for pid in pids.read_text().split() if pids.exists() else []:
        try:
            os.kill(int(pid), signal.SIGKILL)  # a failing test leaves nothing running
        except ProcessLookupError:
            pass


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path, fake) -> None:
    weed, pids = fake
    server = seaweedfs.SeaweedFS(tmp_path / "root", binary=weed)
    server.start(timeout=60)
    (pid,) = map(int, pids.read_text().split())
    assert server.process is not None and server.process.pid == pid  # weed itself, exec'd
    assert server.stop() == -signal.SIGKILL
    assert not alive(pid)
    assert server.stop() == -signal.SIGKILL  # again: nothing left to signal, no error


def test_a_server_that_exits_takes_what_it_left_in_its_group(
    tmp_path: Path, fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """weed ending at start (a port taken, a bad flag) must not leave its children running."""
    weed, pids = fake
    monkeypatch.setenv("FAKE_WEED_CHILD", "1")
    server = seaweedfs.SeaweedFS(tmp_path / "root", binary=weed)
    with pytest.raises(RuntimeError, match="weed server exited with 1"):
        server.start(timeout=60)
    _, child = map(int, pids.read_text().split())
    assert ends(child)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_server_dies_with_the_process_that_started_it(
    tmp_path: Path, fake, how: signal.Signals
) -> None:
    """A test run ended by SIGTERM (``timeout``, a CI cancel) or SIGKILL runs no cleanup."""
    weed, pids = fake
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import importlib.util, sys, time\n"
            "spec = importlib.util.spec_from_file_location('seaweedfs', sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "module.SeaweedFS(sys.argv[2], binary=sys.argv[3]).start(timeout=60)\n"
            "print('started', flush=True)\n"
            "time.sleep(600)\n",
            str(REPO_ROOT / "scripts" / "seaweedfs.py"),
            str(tmp_path / "root"),
            weed,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "started\n"
        (pid,) = map(int, pids.read_text().split())
        parent.send_signal(how)
        parent.wait(60)
        assert ends(pid)
    finally:
        parent.kill()
        parent.wait(60)
