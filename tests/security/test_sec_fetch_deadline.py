"""retry-fetch's deadline bounds the whole exchange, not only the body (a review reproduced it).

httpx's timeouts bound each read, so a server that trickles its response headers a byte at a
time, answers ``103 Early Hints`` forever, or trickles a checksum file's body held the step
open without end under ``--deadline 2s``. Each test runs the CLI in a subprocess against such
a server (which would go on for minutes) and asserts the step ended at all, exit 3, with one
line naming the deadline. The bound on the wait is generous; no test measures time.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from hostile_http import Handler, HostileServer, Route, serve_bytes

from gpuci_testing import run_cli

DEADLINE = ["--deadline", "2s", "--timeout", "1s", "--attempts", "1"]
ENDED_AT_ALL = 90  # seconds: the server below goes on far longer than this
TRICKLE_S = 0.2


def _until_stopped(h: Handler, send: bytes, first: bytes = b"") -> None:
    """Write ``first``, then ``send`` every TRICKLE_S, until the client hangs up or the test
    ends (each write stays well under the per-read timeout)."""
    h.close_connection = True
    try:
        h.wfile.write(first)
        h.wfile.flush()
        while not h.server_ref.stop.wait(TRICKLE_S):
            h.wfile.write(send)
            h.wfile.flush()
    except OSError:
        pass  # the client hung up: the deadline worked


def trickled_headers() -> Route:
    return lambda h: _until_stopped(h, b"a", b"HTTP/1.1 200 OK\r\nX-Slow: ")


def endless_early_hints() -> Route:
    return lambda h: _until_stopped(h, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")


def trickled_body() -> Route:
    return lambda h: _until_stopped(h, b"a", b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")


@pytest.fixture
def evil():
    with HostileServer() as srv:
        yield srv


def run_bounded(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return run_cli(*args, cwd=tmp_path, timeout=ENDED_AT_ALL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"retry-fetch with --deadline 2s still ran after {ENDED_AT_ALL}s")


def assert_deadline_line(proc: subprocess.CompletedProcess[str]) -> None:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3, text
    assert "deadline of 2s" in text, text
    twice = [line for line in text.splitlines() if line.count("deadline of") > 1]
    assert not twice, twice  # the line says it once
    assert "Traceback" not in text and "internal error" not in text, text


@pytest.mark.parametrize("route", [trickled_headers, endless_early_hints], ids=["headers", "1xx"])
def test_deadline_bounds_the_response_headers(evil: HostileServer, tmp_path: Path, route):
    evil.route("/f.bin", route())
    proc = run_bounded(
        tmp_path, "retry-fetch", *DEADLINE, "--url", evil.url("/f.bin"), "--dest", "f.bin"
    )
    assert_deadline_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_deadline_bounds_the_checksum_file(evil: HostileServer, tmp_path: Path):
    evil.route("/f.bin", serve_bytes(b"x" * 1000)).route("/SHA256SUMS", trickled_body())
    proc = run_bounded(
        tmp_path,
        "retry-fetch",
        *DEADLINE,
        "--url",
        evil.url("/f.bin"),
        "--dest",
        "f.bin",
        "--sha256",
        evil.url("/SHA256SUMS"),
    )
    assert_deadline_line(proc)
    assert "checksum file" in proc.stdout + proc.stderr
    assert not evil.requests("/f.bin")  # no download without its digest


def test_deadline_bounds_a_dry_run_probe(evil: HostileServer, tmp_path: Path):
    evil.route("/f.bin", trickled_headers())
    proc = run_bounded(
        tmp_path,
        "retry-fetch",
        "--dry-run",
        "--probe",
        *DEADLINE,
        "--url",
        evil.url("/f.bin"),
        "--dest",
        "f.bin",
    )
    assert_deadline_line(proc)


def test_a_deadline_in_a_library_call_bounds_its_headers(evil: HostileServer, tmp_path: Path):
    """fetch_file (the cache's populate, examples) ends by its policy's deadline too."""
    from gpuci.errors import FetchError
    from gpuci.fetch import FetchPolicy, fetch_file

    evil.route("/f.bin", endless_early_hints())
    policy = FetchPolicy(attempts=1, timeout=1, deadline=1)
    failed: list[BaseException] = []

    def fetch() -> None:
        try:
            fetch_file(evil.url("/f.bin"), tmp_path / "f.bin", policy=policy)
        except FetchError as exc:
            failed.append(exc)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(ENDED_AT_ALL)
    assert not worker.is_alive(), f"fetch_file still ran after {ENDED_AT_ALL}s"
    assert failed and "deadline of 1s" in str(failed[0])
