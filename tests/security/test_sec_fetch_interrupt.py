"""Ctrl-C stops retry-fetch at once, with nothing renamed into place (a review reproduced it).

The CLI ran every download on a pool thread, so a SIGINT landed in the main thread's wait and
the pool's shutdown waited for the download to finish: the file was fully fetched and renamed
17 s after the Ctrl-C, and the step's outputs were lost. Each test starts the CLI in a
subprocess against a server that would take minutes, sends SIGINT once the download runs, and
asserts the process ended at all within a generous bound, exit 130, no final file.

A worker in a retry's wait (a 503 with a ten-minute Retry-After) slept it out after the
interrupt, and the process with it: its waits now end at the abort too.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
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


def interrupted(
    tmp_path: Path,
    srv: HostileServer,
    names: list[str],
    flags: tuple[str, ...] = ("--max-wait", "1s"),
    settle: float = 0.0,
) -> subprocess.Popen[str]:
    """The CLI fetching ``names`` with ``flags``, sent SIGINT once every download has asked
    its server (and ``settle`` seconds more: time to read the answers)."""
    args = []
    for name in names:
        args += ["--url", f"{srv.url('/' + name)} - {name}"]
    cmd = [sys.executable, "-m", "gpuci", "retry-fetch", *flags, *args]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_for_requests(srv, len(names))
    except BaseException:
        proc.kill()
        raise
    time.sleep(settle)
    proc.send_signal(signal.SIGINT)
    return proc


def ended(proc: subprocess.Popen[str]) -> str:
    """What the CLI printed, once it ended (within ENDED_AT_ALL of the Ctrl-C, or of the
    failure that should stop it)."""
    try:
        out, _ = proc.communicate(timeout=ENDED_AT_ALL)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"retry-fetch still ran {ENDED_AT_ALL}s after it was told to stop")
    return out.decode(errors="replace")


@pytest.mark.parametrize("count", [1, 3], ids=["one-file", "parallel"])
def test_ctrl_c_stops_the_downloads_and_renames_nothing(slow, tmp_path: Path, count: int):
    names = [f"f{i}.bin" for i in range(count)]
    for name in names:
        slow.route("/" + name, slow_file())
    proc = interrupted(tmp_path, slow, names)
    text = ended(proc)
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert not [n for n in names if (tmp_path / n).exists()], os.listdir(tmp_path)


def throttled_then_served() -> Route:
    """A 503 asking for ten minutes' wait, then (to a retry that came) the whole file."""

    def route(h: Handler) -> None:
        if len(h.server_ref.requests(h.record.path)) == 1:
            h.reply(503, b"", {"Retry-After": "600"})
        else:
            h.reply(200, b"x" * SIZE, {"ETag": '"v1"'})

    return route


def test_ctrl_c_ends_the_retry_waits_of_parallel_downloads(slow, tmp_path: Path):
    """Three files, each worker waiting out a 503's Retry-After (max-wait 10 minutes): Ctrl-C
    ends the step at once, and no retry asks again or renames a file into place after it."""
    names = [f"f{i}.bin" for i in range(3)]
    for name in names:
        slow.route("/" + name, throttled_then_served())
    flags = ("--max-wait", "600s", "--deadline", "2h")
    proc = interrupted(tmp_path, slow, names, flags, settle=1.0)  # the 503s read: all wait
    text = ended(proc)
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert len(slow.requests()) == len(names)  # no retry was sent
    assert not [n for n in names if (tmp_path / n).exists()], os.listdir(tmp_path)


def stalled_until_hung_up(hung_up: threading.Event) -> Route:
    """No answer at all: the request is held until the client closes its connection (the
    server reads EOF, or a reset), which sets ``hung_up``; or until the test's server stops."""

    def route(h: Handler) -> None:
        sock = h.connection
        while not h.server_ref.stop.is_set():
            if select.select([sock], [], [], 0.05)[0]:
                try:
                    closed = sock.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    closed = True
                if closed:
                    hung_up.set()
                    return

    return route


def test_ctrl_c_closes_every_probe_of_a_dry_run(slow, tmp_path: Path):
    """A dry run's probes run on a pool too: Ctrl-C while one server holds its answer (a read
    timeout of ten minutes) and another probe has failed (404) closes the held connection at
    once, as the downloads' pool does, instead of leaving it open until its timeout."""
    hung_up = threading.Event()
    slow.route("/held.bin", stalled_until_hung_up(hung_up))  # /gone.bin: 404
    flags = ("--dry-run", "--probe", "--timeout", "600s", "--deadline", "2h")
    proc = interrupted(tmp_path, slow, ["held.bin", "gone.bin"], flags)
    try:
        closed = hung_up.wait(ENDED_AT_ALL)
    finally:
        text = ended(proc)
    assert closed, f"the held probe's connection stayed open after Ctrl-C: {text}"
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text


BIG = 64 << 20  # eight default segments: the first round opens four connections
# How a segment's range fails for good, and the line that says so.
ENDINGS = {
    "404": (lambda h: h.reply(404, b""), "HTTP 404"),
    "changed-etag": (  # with one attempt, a file that changed ends the download too
        lambda h: h.reply(206, b"x", {"ETag": '"v2"', "Content-Range": f"bytes 0-0/{BIG}"}),
        "the file changed during the download",
    ),
}


def one_range_fails_another_is_held(
    fail: Route, head_hung_up: threading.Event, range_hung_up: threading.Event
) -> Route:
    """A file that segments: the first answer (slow enough to look far, so the first round
    opens several connections) sends a few bytes of its body and holds the rest, until the
    client closes it (``head_hung_up``); the first ranged request is held without an answer
    (``range_hung_up`` once closed); the next one is answered by ``fail``."""
    ranged: list[str] = []

    def route(h: Handler) -> None:
        asked = h.headers.get("Range")
        if asked is None:
            h.server_ref.stop.wait(0.1)  # a far server's first answer (FAR_S is 25 ms)
            h.send_response(200)
            for key, value in {
                "Content-Length": BIG,
                "ETag": '"v1"',
                "Accept-Ranges": "bytes",
            }.items():
                h.send_header(key, str(value))
            h.end_headers()
            h.wfile.write(b"x" * 1000)
            h.wfile.flush()
            stalled_until_hung_up(head_hung_up)(h)
            return
        with h.server_ref.lock:
            ranged.append(asked)
            first = len(ranged) == 1
        if first:  # never answered: it waits for headers until its timeout, or a hang-up
            stalled_until_hung_up(range_hung_up)(h)
        else:
            fail(h)  # after the held one was asked: it is in flight

    return route


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_segment_that_fails_for_good_closes_the_other_segments_connections(
    slow, tmp_path: Path, ending: str
):
    """One segment's 404 (or a changed ETag, on the last attempt) ends a segmented download:
    the other segments' requests (one still waiting for its headers, the first answer holding
    its body) are closed at once, not left to their ten-minute timeout, and the step ends
    with exit 3 and one line."""
    fail, said = ENDINGS[ending]
    head_hung_up, range_hung_up = threading.Event(), threading.Event()
    slow.route("/big.bin", one_range_fails_another_is_held(fail, head_hung_up, range_hung_up))
    flags = ["--timeout", "600s", "--deadline", "2h", "--attempts", "1"]
    cmd = [sys.executable, "-m", "gpuci", "retry-fetch", *flags]
    cmd += ["--url", f"{slow.url('/big.bin')} - big.bin"]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        closed = range_hung_up.wait(ENDED_AT_ALL) and head_hung_up.wait(ENDED_AT_ALL)
    finally:
        text = ended(proc)
    assert closed, f"a held segment's connection stayed open after another failed: {text}"
    assert proc.returncode == 3, text
    assert "Traceback" not in text and "Aborted" not in text, text
    errors = [line for line in text.splitlines() if said in line]
    assert len(errors) == 1 and "big.bin" in errors[0], text
    assert not (tmp_path / "big.bin").exists()


def test_a_ctrl_c_the_kernel_hands_to_a_download_thread_still_stops_the_step():
    """The kernel delivers a process's SIGINT to any of its threads. When a download thread
    took it, Python only set its flag, and the main thread, blocked in one untimed wait for the
    downloads, slept through it until every download ended (1 run in ~30 under load: the
    parallel Ctrl-C test above hung). The signal is sent here to a worker thread itself."""
    from gpuci import httpclients
    from gpuci.fetch._command import _fetch_all

    ready = threading.Barrier(3)
    finish = threading.Event()  # the downloads end when the test says so, or after 60 s
    workers: list[int] = []
    returned: list[int] = []

    def download(job: int) -> int:
        workers.append(threading.get_ident())
        ready.wait(30)
        finish.wait(60)
        returned.append(job)
        return job

    def interrupt() -> None:
        ready.wait(30)
        signal.pthread_kill(workers[0], signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    client = httpclients.new_client(timeout=5)
    try:
        with pytest.raises(KeyboardInterrupt):
            _fetch_all([1, 2], 2, client, download)  # type: ignore[list-item]
        assert returned == []  # the interrupt ended the wait, not the downloads' end
    finally:
        finish.set()
        client.close()
