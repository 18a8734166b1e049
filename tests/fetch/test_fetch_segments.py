"""Segmented downloads against a real server on 127.0.0.1: several ranged connections per file,
each segment resumable, every hostile answer kept out of the file (gpuci.fetch._segments)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fetch_server import BIG, BIG_SHA, DATA, SHA, SIZE, Fault, FaultyServer, http_date, leftovers

from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.fetch._partial import inspect

ROOT = Path(__file__).resolve().parents[2]


def ranged(server: FaultyServer, path: str = "/data.bin") -> list:
    return [g for g in server.gets(path) if g.range]


def test_segmented_download_completes_and_verifies(server, tmp_path, seg_policy):
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=seg_policy)
    assert dest.read_bytes() == DATA
    assert res.sha256 == SHA and res.connections == 4
    segments = ranged(server)
    assert len(segments) >= 3
    assert all(g.if_range == '"v1"' and g.status == 206 for g in segments)
    assert all(g.range.startswith("bytes=") and not g.range.endswith("-") for g in segments)
    assert leftovers(dest) == ["out.bin"]


def test_one_connection_unless_asked_for_more(server, tmp_path, policy):
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=replace(policy, connections=1))
    assert res.connections == 1 and len(server.gets()) == 1


@pytest.mark.parametrize(
    "entry",
    [
        {"etag": 'W/"v1"'},  # weak: the same meaning, maybe other bytes
        # a date not a second before the response's Date (here ahead of it: a skewed clock)
        # may hide a change within that second: weak (RFC 9110 8.8.2.2)
        {"etag": None, "last_modified": 60},
        # a weak ETag is the server saying "maybe other bytes": its date is not taken instead
        {"etag": 'W/"v1"', "last_modified": -3600},
        {"accept_ranges": False},  # no Accept-Ranges: bytes
        {"etag": None, "last_modified": -3600, "accept_ranges": False},
    ],
    ids=[
        "weak-etag",
        "last-modified-now",
        "weak-etag-old-date",
        "no-accept-ranges",
        "date-no-ranges",
    ],
)
def test_without_a_strong_etag_and_ranges_one_connection(tmp_path, seg_policy, entry):
    entry = dict(entry)
    if "last_modified" in entry:  # seconds from now, made now: collection may be minutes ago
        entry["last_modified"] = http_date(entry["last_modified"])
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA, **entry)
        dest = tmp_path / "out.bin"
        res = fetch_file(srv.url("/data.bin"), dest, SHA, policy=seg_policy)
        assert dest.read_bytes() == DATA
        assert res.connections == 1
        assert [g.range for g in srv.gets()] == [None]


def test_small_file_uses_one_connection(server, tmp_path, seg_policy):
    res = fetch_file(
        server.url("/data.bin"),
        tmp_path / "out.bin",
        SHA,
        policy=replace(seg_policy, segment_bytes=SIZE),
    )
    assert res.connections == 1 and len(server.gets()) == 1


def test_a_cut_segment_resumes_where_it_stopped(tmp_path, seg_policy):
    with FaultyServer(rate=4_000_000) as srv:  # paced: little in flight when a segment ends
        srv.add("/big", BIG)
        srv.faults("/big", Fault(), Fault(drop_after=50_000))
        dest = tmp_path / "out.bin"
        policy = replace(seg_policy, segment_bytes=128 << 10)
        res = fetch_file(srv.url("/big"), dest, BIG_SHA, policy=policy)
        assert dest.read_bytes() == BIG
        cut = srv.gets("/big")[1]
        assert cut.range and cut.body_bytes == 50_000
        start = int(cut.range[6:].split("-")[0])
        again = [g for g in srv.gets("/big")[2:] if g.range.startswith(f"bytes={start + 50_000}-")]
        assert len(again) == 1 and again[0].if_range == '"v1"'
        assert res.resumed_bytes >= 50_000
        # The cut segment's 50,000 received bytes are never asked for again. Asserted on the
        # ranges requested, not on bytes served: those include what was in flight when a
        # segment was cut or shortened, a socket buffer's worth that grows with the load.
        kept = (start, start + 50_000)
        for g in srv.gets("/big")[2:]:
            first, _, last = g.range[6:].partition("-")
            end = int(last) if last else len(BIG) - 1
            assert end < kept[0] or int(first) >= kept[1], (g.range, kept)


def test_server_ignoring_range_on_a_segment_falls_back_to_one_connection(
    server, tmp_path, seg_policy
):
    server.faults("/data.bin", Fault(), Fault(ignore_range=True))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, None, policy=seg_policy)  # no sha256 to save us
    assert dest.read_bytes() == DATA  # the 200's body never landed at a segment's offset
    assert res.sha256 == SHA
    gets = server.gets()
    ignored = [i for i, g in enumerate(gets) if g.range and g.status == 200]
    assert len(ignored) == 1
    later = gets[ignored[0] + 1 :]
    tail = later[-1]  # the last request continues the file on one connection
    assert tail.range is not None and tail.range.endswith("-") and tail.status == 206
    assert leftovers(dest) == ["out.bin"]


@pytest.mark.parametrize(
    "lie",
    [
        Fault(bad_content_range=True),  # labels the right bytes with another offset
        Fault(shift=1000),  # other bytes than asked, labelled as such
        Fault(content_range_total=SIZE + 1),  # claims another size
        Fault(other_file=os.urandom(SIZE + 10)),  # bytes of a longer file, its own total
    ],
    ids=["mislabelled-offset", "other-offset", "wrong-total", "other-file"],
)
def test_a_lying_content_range_never_reaches_the_file(server, tmp_path, seg_policy, lie):
    server.faults("/data.bin", Fault(), lie)
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, None, policy=seg_policy)  # no sha256
    assert dest.read_bytes() == DATA
    assert res.sha256 == SHA
    assert leftovers(dest) == ["out.bin"]


def test_a_file_changed_mid_download_starts_over_clean(server, tmp_path, seg_policy):
    new = os.urandom(SIZE)
    server.faults("/data.bin", Fault(), Fault(etag='"v2"', new_data=new))  # If-Range is stale
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, None, policy=seg_policy)
    assert dest.read_bytes() == new
    gets = server.gets()
    changed = next(i for i, g in enumerate(gets) if g.range and g.status == 200)
    fresh = [i for i, g in enumerate(gets) if i > changed and g.range is None]
    assert fresh, "a clean restart (a GET without Range) follows the change"
    after = [g for g in gets[fresh[0] :] if g.range]
    assert after and all(g.if_range == '"v2"' for g in after)
    assert res.attempts >= 2


def test_a_206_from_a_changed_file_is_never_spliced(server, tmp_path, seg_policy):
    # the file changes, and the server honours Range although If-Range no longer matches
    # (a broken cache): only the ETag tells, and no old byte may stay
    new = os.urandom(SIZE)
    server.faults(
        "/data.bin",
        Fault(),
        Fault(etag='"v2"', new_data=new, ignore_if_range=True),
        *[Fault(ignore_if_range=True) for _ in range(30)],
    )
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, None, policy=seg_policy)
    assert dest.read_bytes() == new and res.sha256 == hashlib.sha256(new).hexdigest()
    gets = server.gets()
    spliced = next(i for i, g in enumerate(gets) if g.if_range == '"v1"' and g.status == 206 and i)
    assert any(g.range is None for g in gets[spliced + 1 :]), "restarted from byte 0"


def test_segments_follow_the_resolved_url_and_credentials_stay_home(server, tmp_path, seg_policy):
    elsewhere = f"http://localhost:{server.port}/data.bin"  # another origin (host differs)
    server.add("/start", DATA)
    server.faults("/start", Fault(redirect_to=elsewhere))
    dest = tmp_path / "out.bin"
    fetch_file(
        server.url("/start"),
        dest,
        SHA,
        policy=seg_policy,
        headers={"Authorization": "Bearer secret"},
    )
    assert len(server.gets("/start")) == 1  # segments do not walk the redirect again
    at_target = server.gets("/data.bin")
    assert len(at_target) >= 3
    assert not any("Authorization" in g.headers for g in at_target)


def test_segments_on_the_same_origin_keep_credentials(server, tmp_path, seg_policy):
    fetch_file(
        server.url("/data.bin"),
        tmp_path / "out.bin",
        SHA,
        policy=seg_policy,
        headers={"Authorization": "Bearer secret"},
    )
    assert all(g.headers.get("Authorization") == "Bearer secret" for g in server.gets())


def test_segments_send_url_userinfo_credentials_too(server, tmp_path, seg_policy):
    """user:pass@ in the URL becomes a Basic header on the first request: every segment of the
    same origin must send it as well, or a server behind basic auth refuses them (401)."""
    url = server.url("/data.bin").replace("http://", "http://alice:s3cret@", 1)
    fetch_file(url, tmp_path / "out.bin", SHA, policy=seg_policy)
    basic = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    gets = server.gets()
    assert len(gets) >= 3
    assert all(g.headers.get("Authorization") == basic for g in gets)


def test_progress_counts_every_byte_once(server, tmp_path, seg_policy):
    class Meter:
        total: int | None = None
        done = 0

        def advance(self, n: int) -> None:
            self.done += n

    meter = Meter()
    fetch_file(
        server.url("/data.bin"), tmp_path / "out.bin", SHA, policy=seg_policy, progress=meter
    )
    assert meter.done == SIZE and meter.total == SIZE


def test_max_bytes_still_refuses_before_segmenting(server, tmp_path, seg_policy):
    from gpuci.errors import FetchError

    with pytest.raises(FetchError, match="max-bytes"):
        fetch_file(
            server.url("/data.bin"),
            tmp_path / "out.bin",
            policy=replace(seg_policy, max_bytes=SIZE - 1),
        )
    assert len(server.gets()) == 1 and leftovers(tmp_path / "out.bin") == []


_CHILD = """
import sys
sys.path[:0] = {paths!r}
import gpuci.fetch._segments as segments
from gpuci.fetch import FetchPolicy, fetch_file
segments._SAVE_EVERY_S = 0.1
policy = FetchPolicy(attempts=2, timeout=5, deadline=60, connections=4, connections_start=4,
                     segment_bytes=128 << 10)
fetch_file({url!r}, {dest!r}, policy=policy)
"""


def test_a_416_that_contradicts_the_known_size_is_not_a_finished_file(tmp_path):
    """A segmented partial knows the total. A server that now answers ``416 bytes */N`` to
    ``bytes=N-`` (N the written prefix, less than that total) claims the file shrank under the
    same validator: start over, never take the old prefix as the whole file (no sha256 here)."""
    big = os.urandom(12 << 20)
    with FaultyServer(rate=2_000_000) as srv:
        srv.add("/big", big)
        dest = tmp_path / "out.bin"
        code = _CHILD.format(paths=[str(ROOT / "src")], url=srv.url("/big"), dest=str(dest))
        child = subprocess.Popen([sys.executable, "-c", code])
        sidecar = tmp_path / "out.bin.incomplete.json"
        deadline, prefix = time.monotonic() + 60, 0  # a hang guard
        while time.monotonic() < deadline and not prefix:
            time.sleep(0.05)
            found = inspect(dest, srv.url("/big"))
            if found is not None and found.extents and len(found.extents) >= 2:
                first = found.extents[0]
                prefix = first[1] if first[0] == 0 and first[1] >= 1 << 18 else 0
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        found = inspect(dest, srv.url("/big"))
        assert found is not None and found.total == len(big) and sidecar.exists()
        prefix = found.extents[0][1] if found.extents and found.extents[0][0] == 0 else 0
        assert 0 < prefix < len(big)
        shrunk = os.urandom(prefix)  # the same ETag, fewer and other bytes: a liar
        srv.entries["/big"].data = shrunk
        policy = FetchPolicy(attempts=3, timeout=5, deadline=60, max_wait=0.05,
                             initial_wait=0.01, connections=1)  # fmt: skip
        fetch_file(srv.url("/big"), dest, policy=policy)
        assert dest.read_bytes() == shrunk  # fetched again, not the old prefix kept


@pytest.mark.parametrize("changed", [False, True], ids=["same-file", "file-changed-meanwhile"])
def test_a_killed_process_resumes_every_segment(tmp_path, changed, four_segments):
    big = os.urandom(12 << 20)
    with FaultyServer(rate=2_000_000) as srv:  # 4 x 2 MB/s: about 1.5 s for 12 MiB
        srv.add("/big", big)
        dest = tmp_path / "out.bin"
        paths = [str(ROOT / "src")]
        code = _CHILD.format(paths=paths, url=srv.url("/big"), dest=str(dest))
        child = subprocess.Popen([sys.executable, "-c", code])
        sidecar = tmp_path / "out.bin.incomplete.json"
        deadline = time.monotonic() + 60  # a hang guard
        while time.monotonic() < deadline:  # kill once every segment has bytes on record
            time.sleep(0.05)
            try:
                record = json.loads(sidecar.read_text())
            except (OSError, ValueError):
                continue
            if len(record.get("segments", [])) >= 3:
                break
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert child.returncode == -signal.SIGKILL and not dest.exists()
        found = inspect(dest, srv.url("/big"))
        assert found is not None and found.extents is not None and len(found.extents) >= 3
        kept = found.size
        assert kept >= 1 << 20
        if changed:  # a new version under the same URL: not one old byte may be kept
            big = os.urandom(len(big))
            srv.entries["/big"].data, srv.entries["/big"].etag = big, '"v2"'
        served_before, before = srv.served(), len(srv.gets("/big"))
        policy = replace(four_segments, attempts=3)
        res = fetch_file(srv.url("/big"), dest, hashlib.sha256(big).hexdigest(), policy=policy)
        assert dest.read_bytes() == big
        resumed = srv.gets("/big")[before:]
        assert resumed[0].range and resumed[0].if_range == '"v1"'
        if changed:
            assert resumed[0].status == 200 and srv.served() - served_before >= len(big)
            return
        assert all(g.range and g.if_range == '"v1"' for g in resumed)
        # each segment went on from its recorded end: only the holes came again (plus what
        # was in flight when a connection was cut at a segment's end: socket buffers, which
        # grow when the machine is busy)
        again = srv.served() - served_before
        assert again <= len(big) - kept + (2 << 20), (again, kept)
        asked = [g.range for g in resumed]
        assert not any(r.startswith("bytes=0-") for r in asked[1:]), asked  # never from zero
        assert res.resumed_bytes >= kept
        assert leftovers(dest) == ["out.bin"]


def test_a_throttled_segment_backs_off_and_completes(server, tmp_path, seg_policy):
    server.faults("/data.bin", Fault(), Fault(status=503, retry_after="0"), Fault(status=429))
    dest = tmp_path / "out.bin"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=seg_policy)
    assert dest.read_bytes() == DATA
    statuses = [g.status for g in server.gets()]
    assert 503 in statuses and 429 in statuses
    assert res.attempts == 1 + 2  # the first try and one per refused segment


def test_a_segments_retries_wait_as_the_retry_policy_says(server, tmp_path, seg_policy, waits):
    """A segment's retry is gpuci.retry's controller: its Retry-After and backoff are the
    policy's waits (before, a hand-written loop chose them beside the policy)."""
    server.faults("/data.bin", Fault(), Fault(status=503, retry_after="0"), Fault(status=429))
    fetch_file(server.url("/data.bin"), tmp_path / "out.bin", SHA, policy=seg_policy)
    assert len(waits) == 2 and 0.0 in waits  # the 503's Retry-After: 0, the 429's backoff
    assert all(0 <= w <= seg_policy.max_wait for w in waits)


def test_a_segment_that_keeps_failing_fails_the_download_and_keeps_what_arrived(
    server, tmp_path, seg_policy
):
    from gpuci.errors import FetchError

    policy = replace(seg_policy, attempts=2)
    server.faults("/data.bin", Fault(), *[Fault(status=500) for _ in range(40)])
    dest = tmp_path / "out.bin"
    with pytest.raises(FetchError, match="HTTP 500"):
        fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert not dest.exists()
    found = inspect(dest, server.url("/data.bin"))  # the head's bytes stay, on record
    assert found is not None and found.extents is not None and found.size > 0


def test_the_command_caps_connections_and_reports_them(tmp_path, monkeypatch):
    from test_fetch_command import fetch as run_fetch

    monkeypatch.chdir(tmp_path)
    big = os.urandom(20 << 20)  # over the 16 MiB threshold of the default segment size
    sha = hashlib.sha256(big).hexdigest()
    with FaultyServer(rate=16 << 20, latency=0.01) as srv:  # a capped link: worth growing
        srv.add("/big", big)
        flags = {"url": srv.url("/big"), "sha256": sha, "dest": "a.bin", "connections": "4"}
        result, text = run_fetch(flags, tmp_path)
        assert result.ok, text
        assert 2 <= result.outputs["connections"] <= 4
        assert (tmp_path / "a.bin").read_bytes() == big
        before = len(srv.gets())
        result, text = run_fetch({**flags, "dest": "b.bin", "connections": "1"}, tmp_path)
        assert result.ok and result.outputs["connections"] == 1, text
        assert len(srv.gets()) - before == 1


def test_a_large_file_starts_wide(tmp_path, seg_policy):
    """The first response shows the size and a strong ETag: the other connections open at
    once (as aria2c -x8 -s8 does), not one by one as throughput proves each pays. The first
    connection stalls for 3 s after 64 KiB: a ramp, which grows only on measured bytes,
    opens nothing more until it resumes; a wide start has all four open long before."""
    with FaultyServer(rate=1_000_000, latency=0.05) as srv:  # far: 50 ms to each first byte
        srv.add("/big", BIG)
        srv.faults("/big", Fault(stall=3.0, stall_after=64 << 10))
        policy = replace(seg_policy, connections_start=0, segment_bytes=128 << 10, timeout=10)
        res = fetch_file(srv.url("/big"), tmp_path / "out.bin", BIG_SHA, policy=policy)
        assert (tmp_path / "out.bin").read_bytes() == BIG and res.connections == 4
        head, *others = srv.gets("/big")[:4]
        assert head.range is None and len(others) == 3
        # generous slack for a busy machine; the stall alone is 3 s
        assert all(g.arrived - head.arrived < 2.0 for g in others)
        assert all(g.if_range == '"v1"' and g.status == 206 for g in others)


@pytest.mark.parametrize(
    ("left_mib", "ceiling", "expected"),
    [(16, 16, 2), (64, 16, 4), (256, 16, 8), (4096, 16, 8), (256, 3, 3), (256, 1, 1)],
)
def test_wide_start_grows_with_the_size_for_a_far_server(left_mib, ceiling, expected):
    from gpuci.fetch._widths import wide_start

    policy = FetchPolicy(connections=ceiling)  # 8 MiB segments
    assert wide_start(left_mib << 20, policy, first_byte_s=0.03) == expected
    assert wide_start(left_mib << 20, policy) == expected  # not measured: assume far
    assert wide_start(left_mib << 20, replace(policy, connections_start=1), 0.03) == 1


def test_a_near_server_starts_with_one_connection():
    """Loopback or the same cluster: the CPU is the limit, the controller ramps if it pays."""
    from gpuci.fetch._widths import wide_start

    assert wide_start(1 << 30, FetchPolicy(), first_byte_s=0.002) == 1
    assert wide_start(1 << 30, FetchPolicy(connections_start=4), first_byte_s=0.002) == 4


def test_an_old_last_modified_with_ranges_is_strong_enough_to_segment(tmp_path, seg_policy):
    date = http_date(-3600)
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA, etag=None, last_modified=date)
        res = fetch_file(srv.url("/data.bin"), tmp_path / "out.bin", None, policy=seg_policy)
        assert (tmp_path / "out.bin").read_bytes() == DATA and res.sha256 == SHA
        assert res.connections > 1
        segments = [g for g in srv.gets() if g.range]
        assert segments and all(g.if_range == date and g.status == 206 for g in segments)


def test_a_changed_last_modified_mid_download_starts_over(tmp_path, seg_policy):
    """The date moved (the file changed) and a broken cache still honours Range: the
    segment's Last-Modified tells, and no old byte is spliced in."""
    new = os.urandom(SIZE)
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA, etag=None, last_modified=http_date(-3600))
        srv.faults(
            "/data.bin",
            Fault(),
            Fault(last_modified=http_date(-60), new_data=new, ignore_if_range=True),
            *[Fault(ignore_if_range=True) for _ in range(40)],
        )
        res = fetch_file(srv.url("/data.bin"), tmp_path / "out.bin", None, policy=seg_policy)
        assert (tmp_path / "out.bin").read_bytes() == new
        assert res.sha256 == hashlib.sha256(new).hexdigest()
        assert any(g.range is None for g in srv.gets()[1:]), "restarted from byte 0"


class _SlowSha256:
    """sha256 at ~50 MB/s: a hash that cannot keep up with a loopback connection."""

    def __init__(self) -> None:
        self._inner = hashlib.sha256()

    def update(self, data) -> None:
        time.sleep(len(data) / 50e6)
        self._inner.update(data)

    def hexdigest(self) -> str:
        return self._inner.hexdigest()


def test_no_connection_opens_while_the_hash_is_behind(tmp_path, policy, monkeypatch):
    """One connection already brings bytes faster than they are hashed: sha256 is sequential,
    so a second connection cannot verify them sooner, only cost CPU. The controller's first
    window always steps up to 2 (before: this download used 2 connections); held at 1. The
    full-read rule is switched off, so only the hash-lag rule can hold the count."""
    import types

    monkeypatch.setattr("gpuci.hashcursor.hashlib", types.SimpleNamespace(sha256=_SlowSha256))
    monkeypatch.setattr("gpuci.fetch._segments._FULL_READ", 1 << 40)
    _one_connection_for_a_slow_client(tmp_path, policy)


def test_a_client_that_cannot_keep_up_adds_no_connection(tmp_path, policy, monkeypatch):
    """Every read finds the socket full (the client, not the link, is the limit: here a slow
    hash, with the hash-lag rule switched off so only this one can hold): another connection
    would compete for the same CPU, so the count stays at 1 (before: 2, from the controller's
    free first step)."""
    import types

    monkeypatch.setattr("gpuci.hashcursor.hashlib", types.SimpleNamespace(sha256=_SlowSha256))
    monkeypatch.setattr("gpuci.fetch._segments._HASH_LAG", 1 << 40)
    _one_connection_for_a_slow_client(tmp_path, policy)


def test_a_link_that_caps_each_connection_still_ramps(tmp_path, policy):
    """8 MB/s per connection: each read gets what arrived since the last, the client keeps
    up, and the controller adds connections as before."""
    res, _ = _ramped(tmp_path, policy, 4 << 20, 256 << 10, rate=8_000_000)
    assert res.connections >= 2


def _one_connection_for_a_slow_client(tmp_path, policy) -> None:
    """A 64 MiB download (more than the queues and socket buffers hold) uses one connection
    and one GET, and arrives whole."""
    res, gets = _ramped(tmp_path, policy, 64 << 20, 1 << 20)
    assert (res.connections, gets) == (1, 1)


def _ramped(tmp_path, policy, size: int, segment: int, rate: float | None = None):
    """A ``size``-byte file fetched on one connection at first, up to 4 as the controller
    allows (each paced at ``rate`` bytes a second), checked whole: the result and its GETs."""
    big = os.urandom(size)
    with FaultyServer(rate=rate) as srv:
        srv.add("/big", big)
        policy = replace(
            policy, connections=4, connections_start=1, segment_bytes=segment, timeout=10
        )
        dest, sha = tmp_path / "out.bin", hashlib.sha256(big).hexdigest()
        res = fetch_file(srv.url("/big"), dest, sha, policy=policy)
        assert dest.read_bytes() == big
        return res, len(srv.gets("/big"))


def test_segments_slower_than_min_rate_fail_their_attempts(tmp_path, four_segments):
    """Every segment's body keeps min-rate after its first timeout, as the first answer's does
    (the S3 store's rule): a server pacing each connection under it ends the download with the
    rate's line, long before the deadline, instead of trickling on until it."""
    from gpuci.errors import FetchError
    from gpuci_testing import outcome_in_thread

    policy = replace(four_segments, attempts=2, timeout=0.5, deadline=600, min_rate=1 << 20)
    with FaultyServer(rate=50_000) as srv:  # each connection far under 1 MiB/s (a 128 KiB
        # segment at 200 KB/s ended at about the moment its rate fell short: marginal)
        srv.add("/big", BIG)
        url = srv.url("/big")
        failed = outcome_in_thread(
            lambda: fetch_file(url, tmp_path / "out.bin", BIG_SHA, policy=policy)
        )
        assert failed, "the paced download still ran after 60 s"
        closed = [g for g in ranged(srv, "/big") if not g.range.endswith("-")]
    assert closed, "no segment was asked for"
    assert isinstance(failed[0], FetchError) and "min-rate, 1.0 MiB/s" in str(failed[0]), failed
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("wide", [False, True], ids=["one-connection", "segments"])
def test_an_abort_ends_the_retry_waits_and_places_nothing(
    tmp_path, four_segments, wide, waits, monkeypatch
):
    """Ctrl-C with several files aborts the shared client (gpuci.fetch._command._fetch_all): a
    download whose retry waits out a ten-minute Retry-After (the whole file's, or each of its
    segments') ends at once, with nothing renamed into place, instead of sleeping it out."""
    from gpuci import httpclients
    from gpuci.fetch import _segments as segments
    from gpuci.fetch._client import new_client
    from gpuci_testing import wait_until

    first_done = threading.Event()  # the first answer's own range is on disk, its worker over
    work = segments.Segmenter._work

    def noted(self, seg, resp) -> None:
        try:
            work(self, seg, resp)
        finally:
            if resp is not None:
                first_done.set()

    monkeypatch.setattr(segments.Segmenter, "_work", noted)

    policy = replace(four_segments, deadline=3600, max_wait=600)
    if not wide:
        policy = replace(policy, connections=1)
    throttled = Fault(status=503, retry_after="600")
    outcome: list[BaseException] = []
    with FaultyServer(rate=4_000_000) as srv, new_client(policy) as client:
        srv.add("/big", BIG)
        srv.faults("/big", *([Fault()] if wide else []), *[throttled] * 20)

        def fetch() -> None:
            try:
                fetch_file(srv.url("/big"), tmp_path / "out.bin", BIG_SHA, policy=policy,
                           client=client)  # fmt: skip
            except BaseException as exc:
                outcome.append(exc)

        worker = threading.Thread(target=fetch, daemon=True)
        worker.start()

        # only the waits are left: the first answer's own range done (an abort mid-transfer is
        # another story, Aborted) and every request answered 503 has its wait chosen (a 1 s sleep
        # was a busy machine's guess; how many segments ask before the first ends is the
        # segmenter's choice)
        def only_waits_left() -> bool:
            refused = sum(g.status == 503 for g in srv.gets("/big"))
            return (first_done.is_set() or not wide) and 0 < refused <= len(waits)

        wait_until(only_waits_left, 60, "the first range done and every 503's retry wait chosen")
        httpclients.abort(client)
        worker.join(30)
        assert not worker.is_alive(), "the download still waited out its Retry-After"
    from gpuci.retry import Interrupted  # what ended the wait

    assert outcome and isinstance(outcome[0], Interrupted), outcome
    assert not (tmp_path / "out.bin").exists()
