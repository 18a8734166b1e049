"""retry-fetch's deadline bounds the whole exchange, not only the body (a review reproduced it).

httpx's timeouts bound each read, so a server that trickles its response headers a byte at a
time, answers ``103 Early Hints`` forever, or trickles a checksum file's body held the step
open without end under ``--deadline 2s``. Each test runs the CLI in a subprocess against such
a server (which would go on for minutes) and asserts the step ended at all, exit 3, with one
line naming the deadline. The bound on the wait is generous; no test measures time.

A body trickled inside every read's timeout ran until the deadline too (30 minutes by
default): after a first ``timeout`` of grace a body must keep ``min-rate`` (the S3 store's
rule), or its attempt fails with one line naming the rate, is retried, and resumes. Those
tests set a ``--deadline`` of 600 s the step must end well before.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
from hostile_http import (
    Handler,
    HostileServer,
    Route,
    endless_early_hints,
    serve_bytes,
    trickled_body,
    trickled_headers,
)

from gpuci_testing import clean_env, outcome_in_thread, run_cli

DEADLINE = ["--deadline", "2s", "--timeout", "1s", "--attempts", "1"]
ENDED_AT_ALL = 90  # seconds: the server below goes on far longer than this
TRICKLE_S = 0.2


def run_bounded(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return run_cli(*args, cwd=tmp_path, timeout=ENDED_AT_ALL, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"retry-fetch {' '.join(args[1:5])} still ran after {ENDED_AT_ALL}s")


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
        "--min-rate",  # the deadline alone (the rate would end this trickle first)
        "0",
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
    failed = outcome_in_thread(
        lambda: fetch_file(evil.url("/f.bin"), tmp_path / "f.bin", policy=policy), ENDED_AT_ALL
    )
    assert failed, f"fetch_file still ran after {ENDED_AT_ALL}s"
    assert isinstance(failed[0], FetchError) and "deadline of 1s" in str(failed[0]), failed


# ----- the slowest body accepted (min-rate) --------------------------------------------------
# Each read well inside a 1 s timeout; the step must end long before this deadline.
SLOW_BODY = ["--timeout", "1s", "--deadline", "600s", "--max-wait", "1s"]
KEPT = 100_000  # bytes a resumable server sends at once before it trickles


def assert_rate_line(proc: subprocess.CompletedProcess[str], rate: str) -> None:
    """Exit 3 on one line naming the rate and what sets it, never the deadline."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3, text
    assert f"min-rate, {rate}/s" in text and "GPUCI_FETCH_MIN_RATE" in text, text
    assert "0 turns the check off" in text, text
    assert "deadline" not in text and "Traceback" not in text, text


def test_a_body_trickled_inside_the_timeout_fails_by_the_minimum_rate(evil, tmp_path: Path):
    """The default, 256 KiB/s after the first timeout: each attempt fails, and is retried."""
    evil.route("/f.bin", trickled_body())
    proc = run_bounded(
        tmp_path, "retry-fetch", *SLOW_BODY, "--attempts", "2", "--url", evil.url("/f.bin")
    )
    assert_rate_line(proc, "256.0 KiB")
    assert "after 2 attempt(s)" in proc.stdout + proc.stderr
    assert len(evil.requests("/f.bin")) == 2
    assert not (tmp_path / "f.bin").exists()


@pytest.mark.parametrize(
    ("flags", "variable", "rate"),
    [
        (["--min-rate", "1MiB"], None, "1.0 MiB"),
        ([], "2097152", "2.0 MiB"),
        (["--min-rate", "1MiB"], "2097152", "1.0 MiB"),  # the input wins
    ],
    ids=["input", "setting", "input-over-setting"],
)
def test_the_min_rate_input_and_setting_set_the_rate(
    evil, tmp_path: Path, flags: list[str], variable: str | None, rate: str
):
    evil.route("/f.bin", trickled_body())
    env = clean_env(**({"GPUCI_FETCH_MIN_RATE": variable} if variable else {}))
    args = [*SLOW_BODY, "--attempts", "1", *flags, "--url", evil.url("/f.bin")]
    assert_rate_line(run_bounded(tmp_path, "retry-fetch", *args, env=env), rate)


@pytest.mark.parametrize(
    ("flags", "variables"),
    [
        (["--min-rate", "0"], {}),
        ([], {"GPUCI_FETCH_MIN_RATE": "0"}),
        ([], {"INPUT_MIN-RATE": "none"}),  # an Action's `min-rate: none`
    ],
    ids=["input", "setting", "action-input-none"],
)
def test_min_rate_0_turns_the_check_off(
    evil, tmp_path: Path, flags: list[str], variables: dict[str, str]
):
    """With the check off only the deadline ends a trickle (here 2 s), as before."""
    evil.route("/f.bin", trickled_body())
    env = clean_env(**variables)
    args = [*DEADLINE, *flags, "--url", evil.url("/f.bin"), "--dest", "f.bin"]
    proc = run_bounded(tmp_path, "retry-fetch", *args, env=env)
    assert_deadline_line(proc)
    assert "min-rate" not in proc.stdout + proc.stderr


def resumable_then_trickled(data: bytes) -> Route:
    """A file with a strong ETag: the first answer sends KEPT bytes at once, then one byte
    every TRICKLE_S (each read inside the timeout); a ranged retry gets the rest at once."""

    def route(h: Handler) -> None:
        asked = re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or "")
        if asked and h.headers.get("If-Range") == '"v1"':
            start = int(asked.group(1))
            span = f"bytes {start}-{len(data) - 1}/{len(data)}"
            h.reply(206, data[start:], {"ETag": '"v1"', "Content-Range": span})
            return
        head = (
            'HTTP/1.1 200 OK\r\nETag: "v1"\r\nAccept-Ranges: bytes\r\n'
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        sent = iter(data[KEPT:])
        h.close_connection = True
        try:
            h.wfile.write(head + data[:KEPT])
            h.wfile.flush()
            while not h.server_ref.stop.wait(TRICKLE_S):
                h.wfile.write(bytes([next(sent)]))
                h.wfile.flush()
        except OSError:
            pass  # the client hung up on the trickle

    return route


def test_a_trickled_attempt_resumes_from_the_bytes_it_kept(evil, tmp_path: Path):
    """The attempt the rate failed is retried like a cut connection: from the bytes hashed."""
    data = bytes(range(256)) * 1200
    evil.route("/f.bin", resumable_then_trickled(data))
    digest = hashlib.sha256(data).hexdigest()
    args = [*SLOW_BODY, "--attempts", "3", "--url", evil.url("/f.bin"), "--sha256", digest]
    proc = run_bounded(tmp_path, "retry-fetch", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "f.bin").read_bytes() == data
    first, retry = evil.requests("/f.bin")
    assert first.header("Range") is None
    assert int(retry.header("Range").removeprefix("bytes=").rstrip("-")) >= KEPT


def test_a_trickled_checksum_file_fails_by_the_minimum_rate(evil, tmp_path: Path):
    """A checksum file's body keeps the same rate: no download is asked for without it."""
    evil.route("/f.bin", serve_bytes(b"x" * 1000)).route("/SHA256SUMS", trickled_body())
    args = [*SLOW_BODY, "--attempts", "2", "--url", evil.url("/f.bin")]
    proc = run_bounded(tmp_path, "retry-fetch", *args, "--sha256", evil.url("/SHA256SUMS"))
    assert_rate_line(proc, "256.0 KiB")
    assert "checksum file" in proc.stdout + proc.stderr
    assert len(evil.requests("/SHA256SUMS")) == 2 and not evil.requests("/f.bin")
