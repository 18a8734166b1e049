"""Review findings on retry-fetch (stop 42's review: F1, F2, F3, F6): each failed before its fix."""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import replace

import pytest
from fetch_server import DATA, SHA, Fault, FaultyServer, plant_partial, raw_server

from gpuci.errors import FetchError
from gpuci.fetch import FetchPolicy, fetch_file

POLICY = FetchPolicy(attempts=3, timeout=5, deadline=30, max_wait=0.05, initial_wait=0.01)


def test_a_206_body_running_past_its_content_range_is_not_taken_as_the_next_bytes(tmp_path):
    """F2: a resume answered 206 'bytes 100-199/1024' with a chunked body of 924 bytes: only
    bytes 100-199 were announced; the rest must not be written as bytes 200-1023."""
    body = bytes(range(256)) * 4
    liar = b"\xee" * 924  # what 100-199 claims, then 824 bytes the server never announced

    def answer(request: bytes) -> bytes:
        if b"range: bytes=100-" in request.lower():
            return (
                b'HTTP/1.1 206 Partial Content\r\nETag: "v"\r\n'
                b"Content-Range: bytes 100-199/1024\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(liar)
                + liar
                + b"\r\n0\r\n\r\n"
            )
        if b"range: bytes=200-" in request.lower():  # the rest, honestly
            return (
                b'HTTP/1.1 206 Partial Content\r\nETag: "v"\r\n'
                b"Content-Range: bytes 200-1023/1024\r\nContent-Length: 824\r\n\r\n" + body[200:]
            )
        return b'HTTP/1.1 200 OK\r\nETag: "v"\r\nContent-Length: 1024\r\n\r\n' + body[:100]

    url, sock = raw_server(answer)
    try:
        res = fetch_file(url, tmp_path / "o", None, policy=POLICY)
    finally:
        sock.close()
    got = (tmp_path / "o").read_bytes()
    assert got[200:300] != b"\xee" * 100, "bytes past the 206's Content-Range were kept"
    assert got == body[:100] + b"\xee" * 100 + body[200:] and res.attempts == 3


def _short_span_liar(body: bytes) -> Callable[[bytes], bytes]:
    """Ranges answered honestly, except one starting at byte 100: a 206 claiming bytes 100-299
    whose chunked body runs on to the end with bytes it never announced."""
    head = b'ETag: "v"\r\nAccept-Ranges: bytes\r\nConnection: close\r\n'
    size = b"%d" % len(body)

    def answer(request: bytes) -> bytes:
        asked = re.search(rb"range: bytes=(\d+)-(\d*)", request.lower())
        if asked is None:  # no Range: the whole file announced, cut after 100 bytes
            return (
                b"HTTP/1.1 200 OK\r\n"
                + head
                + b"Content-Length: "
                + size
                + b"\r\n\r\n"
                + body[:100]
            )
        start = int(asked.group(1))
        if start == 100:
            tail = b"\xee" * (len(body) - 100)
            return (
                b"HTTP/1.1 206 Partial Content\r\n"
                + head
                + b"Content-Range: bytes 100-299/"
                + size
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(tail)
                + tail
                + b"\r\n0\r\n\r\n"
            )
        last = int(asked.group(2)) if asked.group(2) else len(body) - 1
        return (
            b"HTTP/1.1 206 Partial Content\r\n"
            + head
            + b"Content-Range: bytes %d-%d/" % (start, last)
            + size
            + b"\r\n"
            + b"Content-Length: %d\r\n\r\n" % (last - start + 1)
            + body[start : last + 1]
        )

    return answer


WIDE = replace(POLICY, connections=4, connections_start=4, segment_bytes=32 << 10)


def test_a_wide_resume_whose_206_runs_past_its_content_range_fetches_the_rest_by_ranges(
    tmp_path,
):
    """F2 on several connections: an earlier run's 100 bytes are resumed; the first answer's
    span ends at 300 and its chunked body runs on. The bytes past the span are never written;
    the rest comes over ranged requests in the same attempt."""
    body = bytes(range(256)) * 4096  # 1 MiB
    url, sock = raw_server(_short_span_liar(body))
    plant_partial(tmp_path / "o", body[:100], url, '"v"', total=len(body))
    try:
        res = fetch_file(url, tmp_path / "o", None, policy=WIDE)
    finally:
        sock.close()
    got = (tmp_path / "o").read_bytes()
    assert got == body[:100] + b"\xee" * 200 + body[300:]
    assert res.attempts == 1 and res.resumed_bytes == 100 and res.connections > 1


def test_a_ranged_segment_whose_206_runs_past_its_content_range_is_not_taken(tmp_path):
    """F2 on a segment's retry: the first answer (200, wide) is cut at 100; the head's range
    is asked again as bytes=100-131171 and answered 'bytes 100-299' with a body running on."""
    body = bytes(range(256)) * 4096
    url, sock = raw_server(_short_span_liar(body))
    try:
        fetch_file(url, tmp_path / "o", None, policy=WIDE)
    finally:
        sock.close()
    got = (tmp_path / "o").read_bytes()
    assert got == body[:100] + b"\xee" * 200 + body[300:]


def test_a_resumed_prefix_that_fails_the_sha256_is_fetched_again_from_zero(tmp_path):
    """F3: a partial the same user left (a crashed run's zeros, a neighbour job on a runner
    where every job is one user) passes every ownership check; with a sha256 the run fetches
    the file once more from byte 0 instead of failing on the mismatch."""
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        url = srv.url("/data.bin")
        plant_partial(tmp_path / "o", b"\0" * 100_000, url, total=len(DATA))
        res = fetch_file(url, tmp_path / "o", SHA, policy=POLICY)
        ranges = [r.headers.get("Range") for r in srv.gets()]
    assert (tmp_path / "o").read_bytes() == DATA and res.resumed_bytes == 0
    assert ranges == ["bytes=100000-", None] and res.attempts == 2


def test_a_refetch_from_zero_that_still_fails_the_sha256_ends_the_run_once(tmp_path):
    """F3's bound: one more try from byte 0, not a loop; the second mismatch is the answer."""
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        url = srv.url("/data.bin")
        plant_partial(tmp_path / "o", DATA[:100_000], url, total=len(DATA))
        with pytest.raises(Exception, match="sha256 mismatch") as info:
            fetch_file(url, tmp_path / "o", "0" * 64, policy=POLICY)
        assert len(srv.gets()) == 2
    assert info.value.attempts == 2  # type: ignore[attr-defined]
    assert not (tmp_path / "o.incomplete").exists() and not (tmp_path / "o").exists()


def test_the_final_error_never_shows_the_urls_password_or_signed_query(tmp_path):
    """F6: fetch_file's own one-line error (library callers get no CLI masking) hides the
    source's userinfo and query, as the deadline line does."""
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        srv.faults("/data.bin", *[Fault(status=503) for _ in range(3)])
        host = srv.url("/data.bin").removeprefix("http://")
        url = f"http://user:hunter2@{host}?X-Amz-Signature=s3cr3t"
        with pytest.raises(FetchError) as info:
            fetch_file(url, tmp_path / "o", SHA, policy=POLICY)
    text = f"{info.value.message} {info.value.hint}"
    assert "HTTP 503" in text and "after 3 attempt(s)" in text
    assert "hunter2" not in text and "s3cr3t" not in text


def test_a_sha256_mismatch_never_shows_the_urls_password_or_signed_query(tmp_path):
    """F6: the mismatch line names the source the same masked way."""
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        host = srv.url("/data.bin").removeprefix("http://")
        url = f"http://user:hunter2@{host}?X-Amz-Signature=s3cr3t"
        with pytest.raises(Exception, match="sha256 mismatch") as info:
            fetch_file(url, tmp_path / "o", "0" * 64, policy=POLICY)
    assert "hunter2" not in str(info.value) and "s3cr3t" not in str(info.value)


def test_ctrl_c_on_a_stalled_one_connection_download_does_not_wait_for_the_server(
    tmp_path, monkeypatch
):
    """F1: the one connection was read on a pool thread, and the main thread's KeyboardInterrupt
    waited in the pool's join until that read returned (the stall's end, or the read timeout:
    60 s by default). Ordering, not timing: the interrupt must be honoured while the server
    still stalls (20 s, short of the 30 s read timeout, so a wait for the read would see the
    stall end), so the server has sent only the bytes before its stall; the rerun resumes."""
    from gpuci.fetch import _client as client

    reading = threading.Event()  # the body's first chunk was taken; the next read stalls
    chunks = client.Body.chunks

    def watched(self):
        for chunk in chunks(self):
            yield chunk
            reading.set()

    monkeypatch.setattr(client.Body, "chunks", watched)
    policy = FetchPolicy(
        attempts=2, timeout=30, deadline=60, max_wait=0.05, initial_wait=0.01, connections=1
    )
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        srv.faults("/data.bin", Fault(stall=20, stall_after=50_000))

        def interrupt() -> None:
            if reading.wait(60):
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            fetch_file(srv.url("/data.bin"), tmp_path / "o", SHA, policy=policy)
        sent = srv.gets()[0].body_bytes
        assert sent == 50_000, f"Ctrl-C was honoured only after the stall ended ({sent} sent)"
        monkeypatch.undo()
        res = fetch_file(srv.url("/data.bin"), tmp_path / "o", SHA, policy=policy)
    assert (tmp_path / "o").read_bytes() == DATA and res.resumed_bytes <= 50_000
