"""The one-connection path is a one-segment plan on the engine (gpuci.fetch._segments.Segmenter,
``wide=False``): a body whose size was not announced ends the file where it ends (or past
max-bytes, is refused), a clean end short of an announced size is retried, and after one cut
the accounting holds as on the segmented path (issue 33: ``attempts`` is 1 plus the retries,
``resumed-bytes`` counted once, at most 1.05x served)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from fetch_server import BIG, BIG_SHA, DATA, SHA, SIZE, Fault, FaultyServer
from test_fetch_accounting import Meter

from gpuci.errors import FetchError
from gpuci.fetch import FetchPolicy, fetch_file


def test_a_body_of_unannounced_size_ends_the_file_where_it_ends(server, tmp_path, policy):
    server.faults("/data.bin", Fault(close_delimited=True))
    dest = tmp_path / "o"
    res = fetch_file(server.url("/data.bin"), dest, SHA, policy=policy)
    assert dest.read_bytes() == DATA
    assert (res.bytes, res.attempts, res.connections) == (SIZE, 1, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


@pytest.mark.parametrize("over", [0, 1])
def test_a_body_of_unannounced_size_stops_at_max_bytes(server, tmp_path, policy, over):
    """At max-bytes exactly it is fine; one byte past it is refused and nothing is left."""
    server.faults("/data.bin", Fault(close_delimited=True))
    dest = tmp_path / "o"
    capped = replace(policy, max_bytes=SIZE - over)
    if not over:
        assert fetch_file(server.url("/data.bin"), dest, SHA, policy=capped).bytes == SIZE
        return
    with pytest.raises(FetchError, match="ran past max-bytes"):
        fetch_file(server.url("/data.bin"), dest, SHA, policy=capped)
    assert list(tmp_path.iterdir()) == [] and len(server.gets()) == 1  # not retried


def test_a_clean_end_short_of_the_announced_size_is_retried(server, tmp_path, policy):
    """Chunked framing ending at 100,000 beside a Content-Length of the whole file: a short
    body; the next attempt resumes from what was written."""
    server.faults("/data.bin", Fault(chunked=True, drop_after=100_000))
    res = fetch_file(server.url("/data.bin"), tmp_path / "o", SHA, policy=policy)
    assert (tmp_path / "o").read_bytes() == DATA
    assert [g.range for g in server.gets()] == [None, "bytes=100000-"]
    assert (res.attempts, res.resumed_bytes) == (2, 100_000)


def test_one_cut_on_one_connection_counts_as_on_segments(tmp_path):
    """One connection cut at 40%: two attempts, the kept bytes counted once and never above
    the file, at most 1.05x served, and the progress ends at the file's size exactly."""
    policy = FetchPolicy(
        attempts=4, timeout=5, deadline=60, max_wait=0.05, initial_wait=0.01, connections=1
    )
    meter = Meter()
    with FaultyServer(rate=4_000_000) as srv:
        srv.add("/big", BIG)
        srv.faults("/big", Fault(drop_after=len(BIG) * 4 // 10))
        res = fetch_file(srv.url("/big"), tmp_path / "o", BIG_SHA, policy=policy, progress=meter)
        served = srv.served("/big")
        assert len(srv.gets("/big")) == 2
    assert (tmp_path / "o").read_bytes() == BIG
    assert (res.attempts, res.connections) == (2, 1)
    assert res.resumed_bytes == len(BIG) * 4 // 10
    assert served <= 1.05 * len(BIG), served
    assert meter.done == meter.total == len(BIG) and meter.most_done <= len(BIG)


# ----- the sidecar: the file's size while bytes land in order, ranges before any other --------
def _watch_writes(monkeypatch) -> tuple[list[str], list[int]]:
    """Every write that lands beyond the bytes before it while the sidecar on disk lists no
    ranges, or lists them without a flush first; and the flushes (``fdatasync``) made."""
    import json

    from gpuci.fetch import _partial as partial

    bad: list[str] = []
    flushes: list[int] = []
    ends: list[int] = [0]
    write_at = partial.Partial.write_at

    def watched(self, offset, chunks):
        if offset > max(ends):  # out of order: the record must already say so, durably
            record = json.loads(self.meta.read_text())
            if "segments" not in record or not flushes:
                bad.append(f"a write at {offset} with {record} on record, {len(flushes)} flushes")
        done = write_at(self, offset, chunks)
        ends.append(offset + done)
        return done

    monkeypatch.setattr(partial.Partial, "write_at", watched)
    real = os.fdatasync
    monkeypatch.setattr(partial.os, "fdatasync", lambda fd: (flushes.append(fd), real(fd))[1])
    return bad, flushes


def test_ranges_go_on_record_durably_before_a_byte_lands_out_of_order(
    tmp_path, monkeypatch, four_segments
):
    bad, flushes = _watch_writes(monkeypatch)
    with FaultyServer(rate=8_000_000) as srv:
        srv.add("/big", BIG)
        res = fetch_file(srv.url("/big"), tmp_path / "o", BIG_SHA, policy=four_segments)
    assert (tmp_path / "o").read_bytes() == BIG and res.connections > 1
    assert flushes and not bad, bad


def test_one_connection_in_order_flushes_nothing(tmp_path, monkeypatch):
    """Bytes landing in order from the start need no record but the file's size: flushing
    them every checkpoint made loopback wait on the disk (docs/benchmarks.md). Held at one
    connection as on loopback, where this machine, not the link, is the limit."""
    from gpuci.fetch import _segments as segments

    monkeypatch.setattr(segments.Segmenter, "_cpu_bound", lambda self: self.running > 0)
    bad, flushes = _watch_writes(monkeypatch)
    policy = FetchPolicy(
        attempts=4, timeout=5, deadline=60, max_wait=0.05, initial_wait=0.01,
        connections=4, connections_start=1, segment_bytes=128 << 10,
    )  # fmt: skip
    with FaultyServer(rate=4_000_000) as srv:  # 0.5 s: several checkpoints' time
        srv.add("/big", BIG)
        res = fetch_file(srv.url("/big"), tmp_path / "o", BIG_SHA, policy=policy)
    assert (tmp_path / "o").read_bytes() == BIG and not bad, bad
    assert res.connections == 1 and flushes == []


@pytest.mark.parametrize("connections", [1, 4])
def test_the_deadline_message_never_shows_a_redirect_targets_signed_query(tmp_path, connections):
    """Both paths follow the redirect's URL (a CDN's presigned one, say), which the command
    never saw and so never masked: the deadline's one line names it without its query."""
    policy = FetchPolicy(
        attempts=2, timeout=5, deadline=0.3, max_wait=0.05, initial_wait=0.01,
        connections=connections, connections_start=connections, segment_bytes=32 << 10,
    )  # fmt: skip
    with FaultyServer(rate=100_000) as srv:
        srv.add("/data.bin", DATA)
        srv.add("/old.bin", DATA)
        srv.faults("/old.bin", Fault(redirect_to="/data.bin?X-Amz-Signature=s3cr3t"))
        with pytest.raises(FetchError) as info:
            fetch_file(srv.url("/old.bin"), tmp_path / "o", SHA, policy=policy)
    assert "deadline" in info.value.message
    assert "s3cr3t" not in info.value.one_line(), info.value.one_line()
