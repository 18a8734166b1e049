"""Review 3's findings on retry-fetch (3 to 11): each test failed before its fix."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from fetch_server import DATA, SHA, SIZE, Fault, FaultyServer, plant_partial, raw_server

from gpuci.errors import FetchError, InputError
from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.fetch._partial import Partial
from gpuci.fetch._plan import offline
from gpuci.fetch._policy import RangeMismatch
from gpuci.fetch._sources import Job, build_jobs

KEPT = ((0, 100_000), (150_000, 200_000), (250_000, SIZE))  # a killed segmented run's ranges


def plant_segmented_partial(dest: Path, url: str) -> None:
    """What a segmented run killed mid-way leaves: three ranges written, two holes."""
    kept = bytearray(SIZE)
    for start, end in KEPT:
        kept[start:end] = DATA[start:end]
    plant_partial(dest, bytes(kept), url, total=SIZE, segments=[list(span) for span in KEPT])


def bounded_ranges(server: FaultyServer) -> list[str]:
    """The Range of each request for a bounded span (``bytes=a-b``): the segments' requests."""
    return [g.range for g in server.gets() if g.range and not g.range.endswith("-")]


# ----- finding 3: only hashed bytes are placed -------------------------------------------------
def test_bytes_written_past_the_download_into_the_partial_never_reach_dest(
    server, tmp_path, policy, monkeypatch
):
    """Another process writes past the end of ``<dest>.incomplete`` after the last byte came
    (the partial's descriptor already closed): the file placed is cut to the hashed bytes."""
    dest = tmp_path / "out.bin"
    original = Partial.digest

    def neighbour_writes_then_digest(self: Partial) -> str:
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"#!/bin/sh\necho owned\n", 4 << 20)
        finally:
            os.close(fd)
        return original(self)

    monkeypatch.setattr(Partial, "digest", neighbour_writes_then_digest)
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert res.sha256 == hashlib.sha256(dest.read_bytes()).hexdigest()


# ----- finding 4: a 416 at full length ----------------------------------------------------------
def test_a_complete_leftover_of_wrong_bytes_is_fetched_again_from_byte_zero(
    server, tmp_path, policy
):
    """A leftover at full length whose bytes are wrong (a crash's zeros): the server's 416
    says every byte is held, the sha256 says they are wrong, so they come once more from 0."""
    dest = tmp_path / "out.bin"
    plant_partial(dest, bytes(SIZE), server.url("/data.bin"))
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    gets = server.gets()
    assert gets[0].status == 416 and gets[-1].range is None
    assert dest.read_bytes() == DATA and res.resumed_bytes == 0


# ----- finding 5: a segment's retries end with the deadline -------------------------------------
def test_a_segments_retry_never_waits_past_the_deadline(tmp_path):
    """Each segment request answered 503 + Retry-After: 10 with a deadline of 3 s: no retry
    waits 10 s, so no range is asked twice (before, each was waited out, attempts-1 times)."""
    policy = FetchPolicy(
        attempts=3, timeout=5, deadline=3, max_wait=10, initial_wait=0.01,
        connections=4, connections_start=4, segment_bytes=32 << 10,
    )  # fmt: skip
    with FaultyServer() as srv:
        srv.add("/f", DATA)
        srv.faults("/f", Fault(), *[Fault(status=503, retry_after="10")] * 40)
        dest = tmp_path / "out.bin"
        plant_segmented_partial(dest, srv.url("/f"))
        with pytest.raises(FetchError, match="503"):
            fetch_file(srv.url("/f"), dest, SHA, policy=policy)
        asked = bounded_ranges(srv)
    assert asked and len(asked) == len(set(asked)), asked


# ----- finding 6: an empty 206 counts as a failed attempt ---------------------------------------
def test_an_empty_206_for_a_segment_is_a_failed_attempt_not_asked_forever(tmp_path, policy):
    """A segment answered 206 with the right Content-Range and an empty close-delimited body:
    each is an attempt the retry policy counts, so the download fails after ``attempts``
    (before, the same range was asked again without limit)."""
    seg_policy = replace(
        policy, attempts=2, connections=4, connections_start=4, segment_bytes=32 << 10
    )
    with FaultyServer() as srv:
        srv.add("/f", DATA)
        empty = Fault(close_delimited=True, drop_after=0)
        srv.faults("/f", Fault(), *[empty] * 200)
        dest = tmp_path / "out.bin"
        plant_segmented_partial(dest, srv.url("/f"))
        with pytest.raises(FetchError, match="short body"):
            fetch_file(srv.url("/f"), dest, SHA, policy=seg_policy)
        assert len(srv.gets()) < 50


# ----- finding 7: what sits at dest is untrusted -------------------------------------------------
def test_a_dest_over_max_bytes_is_not_hashed_as_already_present(server, tmp_path, policy):
    """A file at dest larger than max-bytes (a planted sparse one, say) is not read whole
    to decide it is "already present": it is fetched, and that fetch is held to max-bytes."""
    dest = tmp_path / "out.bin"
    dest.write_bytes(DATA)
    small = replace(policy, max_bytes=SIZE - 1)
    with pytest.raises(FetchError, match="max-bytes"):
        fetch_file(server.url("/data.bin"), dest, SHA, policy=small)
    assert server.gets()  # asked: the file at dest was not taken as verified


def test_a_dry_run_does_not_hash_a_dest_over_max_bytes(tmp_path, policy):
    dest = tmp_path / "out.bin"
    dest.write_bytes(DATA)
    job = Job(url="http://127.0.0.1:9/data.bin", dest=dest, sha256=SHA)
    assert offline(job, policy).action.startswith("skip")  # within max-bytes: as before
    found = offline(job, replace(policy, max_bytes=SIZE - 1))
    assert not found.action.startswith("skip"), found.action


def test_a_fifo_or_a_link_at_dest_is_not_already_present(tmp_path, policy):
    """Opened once without following or blocking: a FIFO (no writer) or a link is "not
    present" at once, never an error or a wait."""
    from gpuci.fetch._download import already_present  # new with this fix

    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    link = tmp_path / "link.bin"
    (tmp_path / "real.bin").write_bytes(DATA)
    link.symlink_to(tmp_path / "real.bin")
    assert already_present(fifo, SHA, None) is None
    assert already_present(link, SHA, None) is None
    assert already_present(tmp_path / "real.bin", SHA, None) == SIZE
    assert already_present(tmp_path / "real.bin", SHA, SIZE - 1) is None


# ----- finding 8: one line's dest is never another's partial ------------------------------------
@pytest.mark.parametrize("suffix", [".incomplete", ".incomplete.json"])
def test_a_dest_that_is_another_lines_partial_is_refused_up_front(tmp_path, suffix):
    lines = [f"http://h/a - {tmp_path}/f", f"http://h/b - {tmp_path}/f{suffix}"]
    with pytest.raises(InputError, match="keeps its partial download"):
        build_jobs(lines, None, None, None, tmp_path)
    with pytest.raises(InputError, match="keeps its partial download"):
        build_jobs(list(reversed(lines)), None, None, None, tmp_path)


# ----- finding 9: --headers go to a checksum URL on the download's origin -----------------------
def test_the_users_headers_reach_a_checksum_file_on_the_same_origin_only(server, policy):
    from gpuci.fetch._client import new_client
    from gpuci.fetch._sources import fetch_checksum, home_credentials  # new with this fix

    server.add("/SHA256SUMS", f"{SHA}  data.bin\n".encode())
    url, sums = server.url("/data.bin"), server.url("/SHA256SUMS")
    secret = {"Authorization": "Bearer s3cr3t"}
    with new_client(policy) as client:
        got = fetch_checksum(
            client, sums, "data.bin", policy, credentials=home_credentials(sums, url, secret)
        )
    assert got == SHA
    assert server.gets("/SHA256SUMS")[0].headers.get("Authorization") == "Bearer s3cr3t"
    assert home_credentials("https://elsewhere.example/SHA256SUMS", url, secret) == {}
    assert home_credentials(sums.replace("127.0.0.1", "localhost"), url, secret) == {}


# ----- finding 10: a server's header text is cut in the one-line error --------------------------
HUGE_RANGE = "bytes " + "9" * 90_000


def test_a_huge_content_range_is_cut_in_the_downloads_error(tmp_path, policy):
    raw = f'HTTP/1.1 206 Partial Content\r\nETag: "v"\r\nContent-Range: {HUGE_RANGE}\r\n'
    url, sock = raw_server(lambda _request: (raw + "Content-Length: 0\r\n\r\n").encode())
    try:
        with pytest.raises(FetchError) as info:
            fetch_file(url, tmp_path / "f.bin", None, policy=replace(policy, attempts=2))
    finally:
        sock.close()
    line = info.value.one_line()
    assert "Content-Range" in line and len(line) < 1000, len(line)


@pytest.mark.parametrize(
    "headers",
    [
        {"ETag": '"v1"', "Content-Range": HUGE_RANGE},  # a span that does not parse
        {"ETag": '"' + "x" * 90_000 + '"', "Content-Range": f"bytes 0-99/{SIZE}"},  # changed
    ],
)
def test_a_huge_header_is_cut_in_a_segments_error(headers):
    from gpuci.fetch._segments import Segmenter

    segmenter = SimpleNamespace(url="http://127.0.0.1:9/f.bin", validator='"v1"', total=SIZE)
    with pytest.raises(RangeMismatch) as info:  # retried: its text is the last cause shown
        Segmenter._check(segmenter, httpx.Response(206, headers=headers), 0, 100)  # type: ignore[arg-type]
    assert len(str(info.value)) < 1000


# ----- finding 11: a link planted at dest is replaced, never followed into a folder -------------
def test_a_dest_that_is_a_link_to_a_folder_is_replaced_not_written_into(server, tmp_path, policy):
    victim = tmp_path / "victim"
    victim.mkdir()
    dest = tmp_path / "shared.bin"
    dest.symlink_to(victim)
    (job,) = build_jobs([server.url("/data.bin")], str(dest), SHA, None, tmp_path)
    assert job.dest == dest  # the file itself, not a folder to put data.bin in
    fetch_file(job.url, job.dest, SHA, policy=policy)
    assert not dest.is_symlink() and dest.read_bytes() == DATA
    assert list(victim.iterdir()) == []


def test_a_real_folder_or_a_trailing_slash_still_names_a_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    url = "http://127.0.0.1:9/data.bin"
    assert build_jobs([url], "real", None, None, tmp_path)[0].dest == tmp_path / "real/data.bin"
    assert build_jobs([url], "link/", None, None, tmp_path)[0].dest == tmp_path / "link/data.bin"


# ----- one deadline for a checksum file and its download ---------------------------------------
def test_a_download_after_a_checksum_file_shares_its_deadline(server, policy, tmp_path):
    """The command fetches the checksum file first and passes its start: a deadline the checksum
    file already used up leaves the download none (it used to start a fresh one: up to about
    twice ``deadline`` in all)."""
    import time

    long_ago = time.monotonic() - 10 * policy.deadline
    with pytest.raises(FetchError, match="deadline"):
        fetch_file(server.url("/data.bin"), tmp_path / "d.bin", policy=policy, started=long_ago)
    assert server.gets("/data.bin") == []
    assert not (tmp_path / "d.bin").exists()
