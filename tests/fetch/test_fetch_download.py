"""fetch_file against a real server on 127.0.0.1: retries, resume, integrity, atomic rename."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import httpx
import pytest
from fetch_server import DATA, SHA, SIZE, Fault, FaultyServer, http_date, leftovers, plant_partial

from gpuci.errors import ExitCode, FetchError, InputError, IntegrityError
from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.fetch._partial import url_key
from gpuci.retry import parse_retry_after


def test_plain_download_is_verified_and_renamed(server: FaultyServer, tmp_path: Path, policy):
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert (res.sha256, res.bytes, res.attempts, res.resumed_bytes) == (SHA, SIZE, 1, 0)
    assert server.served() == SIZE
    assert leftovers(dest) == ["out.bin"]


def test_drop_mid_body_resumes_with_range_and_if_range(server, tmp_path, policy):
    server.faults("/data.bin", Fault(drop_after=100_000), Fault(drop_after=50_000))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert res.attempts == 3
    gets = server.gets()
    assert [g.range for g in gets] == [None, "bytes=100000-", "bytes=150000-"]
    assert [g.if_range for g in gets] == [None, '"v1"', '"v1"']
    assert res.resumed_bytes == 150_000  # each kept byte once (issue 33), not 100,000 + 150,000
    assert server.served() == SIZE  # not one byte fetched twice
    assert leftovers(dest) == ["out.bin"]


def test_drop_is_remote_protocol_error_and_is_named_when_attempts_run_out(server, tmp_path, policy):
    server.faults("/data.bin", *[Fault(drop_after=10_000 * (i + 1)) for i in range(4)])
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError) as info:
        fetch_file(server.url("/data.bin"), dest, policy=policy)
    err = info.value
    assert "RemoteProtocolError" in err.message and "after 4 attempt(s)" in err.message
    assert isinstance(err.__cause__, httpx.RemoteProtocolError)
    assert err.exit_code == ExitCode.INFRA
    assert not dest.exists()
    # what arrived is kept for the next run, with its validator
    assert (tmp_path / "out.bin.incomplete").stat().st_size == 10_000 + 20_000 + 30_000 + 40_000
    meta = json.loads((tmp_path / "out.bin.incomplete.json").read_text())
    url = server.url("/data.bin")
    assert meta == {"validator": '"v1"', "total": SIZE, "url": url, "url_sha256": url_key(url)}


def test_next_run_resumes_from_the_partial_file(server, tmp_path, policy):
    server.faults("/data.bin", *[Fault(drop_after=60_000)] * 4)
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError):
        fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    served_before = server.served()
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)  # a new "process"
    assert dest.read_bytes() == DATA
    assert res.attempts == 1 and res.resumed_bytes == 240_000
    assert server.served() - served_before == SIZE - 240_000
    assert leftovers(dest) == ["out.bin"]


def test_stall_times_out_and_resumes(server, tmp_path, policy):
    server.faults("/data.bin", Fault(stall=600, stall_after=70_000))  # until the server stops
    dest = tmp_path / "out.bin"
    policy = dataclasses.replace(policy, timeout=2)  # past a busy machine's pauses, not a stall's
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert res.attempts == 2  # the 2 s read timeout fired: a stall sat out ends in one
    assert server.gets()[1].range == f"bytes={res.resumed_bytes}-"
    assert res.resumed_bytes >= 65_536  # at least one chunk was received before the stall
    assert server.served() <= SIZE + 70_000


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(server, tmp_path, policy, status):
    server.faults("/data.bin", Fault(status=status), Fault(status=status))
    # No stall here: a read timeout a busy machine cannot trip, so the count is the statuses'.
    policy = dataclasses.replace(policy, timeout=10)
    res = fetch_file(server.url("/data.bin"), tmp_path / "out.bin", SHA, policy=policy)
    assert res.attempts == 3
    assert server.served() == SIZE


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 501])
def test_other_statuses_fail_at_once(server, tmp_path, policy, status):
    server.faults("/data.bin", Fault(status=status))
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError) as info:
        fetch_file(server.url("/data.bin"), dest, policy=policy)
    assert f"HTTP {status}" in info.value.message
    assert "after 1 attempt(s)" in info.value.message
    assert info.value.hint
    assert len(server.gets()) == 1
    assert leftovers(dest) == []  # no final file, no partial litter


def test_retry_after_seconds_is_honoured(server, tmp_path, waits):
    server.faults("/data.bin", Fault(status=503, retry_after="1"))
    policy = FetchPolicy(attempts=3, timeout=10, deadline=30, max_wait=5, initial_wait=0.01)
    res = fetch_file(server.url("/data.bin"), tmp_path / "out.bin", SHA, policy=policy)
    assert res.attempts == 2 and waits == [1.0]  # the server's second, not the 10 ms backoff


def test_retry_after_date_is_honoured_but_capped_by_max_wait(server, tmp_path, waits):
    server.faults("/data.bin", Fault(status=429, retry_after=http_date(3600)))
    policy = FetchPolicy(attempts=3, timeout=10, deadline=30, max_wait=0.4, initial_wait=0.001)
    res = fetch_file(server.url("/data.bin"), tmp_path / "out.bin", SHA, policy=policy)
    assert waits == [0.4]  # waited max-wait, not an hour, not the ~1 ms backoff
    assert res.attempts == 2


def test_parse_retry_after_forms():
    assert parse_retry_after("120") == 120
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470) == 10
    assert parse_retry_after(http_date(-60)) == 0  # a date in the past: retry now
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_server_ignoring_range_restarts_cleanly(server, tmp_path, policy):
    server.faults("/data.bin", Fault(drop_after=100_000), Fault(ignore_range=True))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA  # not the first 100 KB followed by the whole file
    assert server.gets()[1].status == 200
    assert res.resumed_bytes == 0
    assert server.served() == 100_000 + SIZE


def test_changed_etag_makes_if_range_send_the_whole_new_file(server, tmp_path, policy):
    server.faults("/data.bin", Fault(drop_after=100_000))
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError):
        fetch_file(server.url("/data.bin"), dest, policy=FetchPolicy(attempts=1, timeout=10))
    new = bytes(reversed(DATA))
    server.add("/data.bin", new, etag='"v2"')
    res = fetch_file(server.url("/data.bin"), dest, policy=policy)
    assert dest.read_bytes() == new  # never old head + new tail
    assert server.gets()[1].if_range == '"v1"' and server.gets()[1].status == 200
    assert res.resumed_bytes == 0


def test_206_from_a_changed_file_is_refused(server, tmp_path, policy):
    """A server that ignores If-Range and answers 206 with a new ETag must not be spliced."""
    server.faults("/data.bin", Fault(drop_after=100_000), Fault(etag='"v2"', ignore_if_range=True))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    gets = server.gets()
    assert [g.status for g in gets] == [200, 206, 200]
    assert gets[2].range is None  # started over after refusing the 206
    assert dest.read_bytes() == DATA
    assert res.attempts == 3 and res.resumed_bytes == 0


def test_206_with_wrong_content_range_is_refused(server, tmp_path, policy):
    server.faults("/data.bin", Fault(drop_after=100_000), Fault(bad_content_range=True))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert [g.range for g in server.gets()] == [None, "bytes=100000-", None]
    assert res.attempts == 3


def test_a_resumed_206_naming_another_total_is_refused_before_a_byte_is_written(
    server, tmp_path, policy
):
    """A resume's answer is checked against what was asked (gpuci.fetch._client.answered_span,
    as a segment's is): a 206 that names another size than the file has is not appended."""
    server.faults("/data.bin", Fault(drop_after=100_000), Fault(content_range_total=2 * SIZE))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert [g.range for g in server.gets()] == [None, "bytes=100000-", None]
    assert res.attempts == 3 and res.resumed_bytes == 0


def test_short_body_is_detected_and_retried(server, tmp_path, policy):
    server.faults("/data.bin", Fault(drop_after=SIZE - 1))  # Content-Length says SIZE
    dest = tmp_path / "out.bin"
    fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert server.gets()[1].range == f"bytes={SIZE - 1}-"
    assert server.served() == SIZE


def test_short_body_without_retries_never_reaches_the_final_name(server, tmp_path):
    server.faults("/data.bin", Fault(drop_after=SIZE - 10))
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError) as info:
        fetch_file(server.url("/data.bin"), dest, policy=FetchPolicy(attempts=1, timeout=10))
    assert "after 1 attempt(s)" in info.value.message
    assert not dest.exists()


def test_wrong_checksum_deletes_and_names_both_digests(server, tmp_path, policy):
    server.faults("/data.bin", Fault(corrupt=True))
    dest = tmp_path / "out.bin"
    bad = hashlib.sha256(bytes([DATA[0] ^ 0xFF]) + DATA[1:]).hexdigest()
    with pytest.raises(IntegrityError) as info:
        fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert SHA in info.value.message and bad in info.value.message
    assert info.value.exit_code == ExitCode.INFRA
    assert leftovers(dest) == []  # nothing under the final name, no partial either


def test_redirect_is_followed(server, tmp_path, policy):
    server.add("/old.bin", DATA)
    server.faults("/old.bin", Fault(redirect_to="/data.bin"))
    dest = tmp_path / "out.bin"
    fetch_file(server.url("/old.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert [r.path for r in server.gets()] == ["/old.bin", "/data.bin"]


def test_416_at_full_length_means_done(server, tmp_path, policy):
    """A previous run got every byte but died before the rename."""
    dest = tmp_path / "out.bin"
    plant_partial(dest, DATA, server.url("/data.bin"))
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert server.gets()[0].status == 416
    assert server.served() == 0
    assert dest.read_bytes() == DATA and res.resumed_bytes == len(DATA)
    assert leftovers(dest) == ["out.bin"]


def test_partial_without_validator_is_not_trusted(server, tmp_path, policy):
    dest = tmp_path / "out.bin"
    (tmp_path / "out.bin.incomplete").write_bytes(b"garbage" * 100)
    fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert server.gets()[0].range is None
    assert dest.read_bytes() == DATA


def test_content_encoded_response_is_refused_not_decoded(server, tmp_path, policy):
    """We ask for identity; an encoded body is refused (tests/security has the gzip bomb)."""
    server.faults("/data.bin", Fault(gzip=True))
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError, match="Content-Encoding: gzip"):
        fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    gets = server.gets()
    assert len(gets) == 1  # not retried: another try gets the same answer
    assert gets[0].headers.get("Accept-Encoding") == "identity"
    assert leftovers(dest) == []


def test_an_encoded_answer_falls_back_to_a_mirror(server, tmp_path, policy):
    server.add("/mirror.bin", DATA)
    server.faults("/data.bin", Fault(gzip=True))
    dest = tmp_path / "out.bin"
    res = fetch_file(
        server.url("/data.bin"), dest, SHA, policy=policy, mirrors=[server.url("/mirror.bin")]
    )
    assert res.url == server.url("/mirror.bin") and dest.read_bytes() == DATA


def test_existing_verified_file_is_not_fetched_again(server, tmp_path, policy):
    dest = tmp_path / "out.bin"
    dest.write_bytes(DATA)
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert res.skipped and res.attempts == 0
    assert server.gets() == []


def test_mirror_is_used_after_the_main_url_fails(server, tmp_path, policy):
    server.add("/gone.bin", DATA)
    server.faults("/gone.bin", *[Fault(status=503)] * 4)
    dest = tmp_path / "out.bin"
    res = fetch_file(
        server.url("/gone.bin"),
        dest,
        SHA,
        policy=policy,
        mirrors=[server.url("/missing.bin"), server.url("/data.bin")],
    )
    assert res.url == server.url("/data.bin")
    assert res.attempts == 4 + 1 + 1
    assert dest.read_bytes() == DATA


def test_deadline_bounds_the_whole_download(tmp_path):
    with FaultyServer() as srv:
        srv.add("/slow.bin", DATA)
        srv.faults("/slow.bin", *[Fault(status=503, retry_after="1")] * 10)
        policy = FetchPolicy(attempts=10, timeout=1, deadline=1.5, max_wait=1, initial_wait=0.01)
        with pytest.raises(FetchError) as info:
            fetch_file(srv.url("/slow.bin"), tmp_path / "out.bin", policy=policy)
        assert "HTTP 503" in info.value.message and "deadline" in info.value.message
        # 1 s apart, the 1.5 s deadline leaves room for two attempts, not the ten allowed
        assert 1 <= len(srv.gets("/slow.bin")) <= 2


def test_connection_refused_is_retried_then_reported(tmp_path, policy):
    with FaultyServer() as srv:
        url = srv.url("/x")
    with pytest.raises(FetchError) as info:  # the port is closed now
        fetch_file(url, tmp_path / "out.bin", policy=policy)
    assert "ConnectError" in info.value.message and "after 4 attempt(s)" in info.value.message


def test_headers_are_sent(server, tmp_path, policy):
    fetch_file(
        server.url("/data.bin"),
        tmp_path / "o",
        policy=policy,
        headers={"Authorization": "Bearer s3cret"},
    )
    assert server.gets()[0].headers["Authorization"] == "Bearer s3cret"


def test_empty_file(server, tmp_path, policy):
    server.add("/empty", b"")
    dest = tmp_path / "empty"
    res = fetch_file(server.url("/empty"), dest, hashlib.sha256(b"").hexdigest(), policy=policy)
    assert dest.read_bytes() == b"" and res.bytes == 0
    assert leftovers(dest) == ["empty"]


def test_invalid_url_is_bad_input_before_any_request(tmp_path, policy):
    with pytest.raises(InputError) as info:
        fetch_file("http://127.0.0.1:notaport/x", tmp_path / "x", policy=policy)
    assert "invalid port" in info.value.message and info.value.exit_code == ExitCode.BAD_INPUT


@pytest.mark.parametrize("below", ["file", "x" * 300], ids=["under-a-file", "name-too-long"])
def test_a_destination_no_folder_can_be_made_at_is_bad_input(server, tmp_path, policy, below):
    """Under a file, or a folder name past 255 bytes: the dest input's one line, exit 2 (it
    said "cannot prepare ...: File exists", exit 3, blaming the runner's disk)."""
    from gpuci.errors import InputError

    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(InputError) as info:
        fetch_file(server.url("/data.bin"), tmp_path / below / "out.bin", policy=policy)
    assert info.value.exit_code == 2 and "cannot make the destination" in info.value.message
    assert info.value.hint
