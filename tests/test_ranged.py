"""The ranged-download engine's own pieces (gpuci.ranged): byte ranges, the planner's work
stealing, and the pool fed by a planner. The engine's behaviour end to end is covered where
the cache (tests/cache/test_cache_datapath.py) and retry-fetch (tests/fetch/) drive it."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from gpuci.adaptive import Concurrency
from gpuci.ranged import _extents as extents
from gpuci.ranged import _pool
from gpuci.ranged._drive import pump
from gpuci.ranged._plan import Plan, Segment
from gpuci.ranged._pool import WorkPool, laneless
from gpuci.ranged._retry import retry_segment, throttles, work_through
from gpuci.ranged._sink import HelperSink
from gpuci.retry import RetryPolicy

MIB = 1 << 20


def test_ranges_merge_holes_and_cuts():
    assert extents.merge([(5, 9), (0, 3), (3, 4), (8, 12), (20, 20)]) == [(0, 4), (5, 12)]
    assert extents.holes(2, [(4, 6), (5, 8)], 10) == [(2, 4), (8, 10)]
    assert extents.cut(10, 4) == [(0, 4), (4, 4), (8, 2)]
    # spread over 32 connections, within [4 MiB, 64 MiB], aligned
    assert extents.part_size(512 * MIB, 32, 4 * MIB, 64 * MIB, 4096) == 16 * MIB
    assert extents.part_size(MIB, 32, 4 * MIB, 64 * MIB, 4096) == 4 * MIB


def test_a_resumed_plan_asks_only_for_the_holes():
    plan = Plan(offset=MIB, written=[(2 * MIB, 3 * MIB)], total=4 * MIB, steal_bytes=64 << 10)
    assert (plan.head.start, plan.head.end) == (MIB, 2 * MIB)
    assert [(s.start, s.end) for s in plan.pending] == [(3 * MIB, 4 * MIB)]
    assert plan.written() == [(0, MIB), (2 * MIB, 3 * MIB)]


def test_a_new_connection_takes_the_far_half_past_what_was_asked():
    plan = Plan(offset=0, written=[], total=8 * MIB, steal_bytes=64 << 10)
    head = plan.head
    head.owned, head.asked = True, 8 * MIB  # the open-ended first answer: must be cut
    seg = plan.take(steal=True)
    assert seg is not None and (seg.start, seg.end) == (4 * MIB, 8 * MIB) and head.end == 4 * MIB
    seg.owned, seg.asked = True, 5 * MIB  # a bounded request: the cut goes past it
    third = plan.take(steal=True)
    assert third is not None and third.start >= 5 * MIB and seg.end == third.start
    assert plan.take(steal=False) is None  # one connection: nothing is split


def test_a_fed_pool_runs_what_its_planner_submits_within_the_limit():
    # Room for 8 threads, a limit of 3 that never grows: the limit, not the thread cap, holds.
    control = Concurrency(start=3, ceiling=8, reprobe_s=None, far_latency_s=None)
    control.settled = True
    pool = WorkPool(control, chunk=lambda _index: 0)
    lock = threading.Lock()
    state = {"planned": 0, "done": 0, "running": 0, "peak": 0}
    together = threading.Barrier(3, timeout=60)  # three tasks must run at once to pass it
    fourth = threading.Event()  # set only if a fourth task ran beside them: a broken limit

    def task(_lane) -> None:
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
            if state["running"] > 3:
                fourth.set()
        together.wait()
        fourth.wait(0.2)  # hold the slots a while: a pool over its limit starts a fourth
        with lock:
            state["running"] -= 1
            state["done"] += 1

    def feed() -> bool:  # one task per tick, as a planner hands out ranges
        with lock:
            if state["planned"] == 9:
                return False
            state["planned"] += 1
        pool.submit(task)
        return True

    pool.run(feed, tick=0.001)
    assert state["done"] == 9 and state["peak"] == 3 and pool.threads == 3


class _ListSink:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.closed = False

    def write(self, chunk: bytes) -> None:
        self.got.append(bytes(chunk))

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("started", [False, True], ids=["before-it-ran", "once-it-ran"])
def test_a_ctrl_c_while_the_pool_starts_a_thread_is_the_ctrl_c(monkeypatch, started):
    """Ctrl-C lands in ``Thread.start`` (which waits for the new thread to say it started):
    the pool stops and the interrupt is what comes out, never "cannot join thread before it
    is started" (an internal error where the user pressed Ctrl-C)."""
    pool = WorkPool(2)
    ran: list[int] = []
    pool.submit(laneless(ran.append, 1))

    class Interrupted(threading.Thread):
        def start(self) -> None:
            if started:
                super().start()
            raise KeyboardInterrupt

    monkeypatch.setattr(_pool, "threading", SimpleNamespace(Thread=Interrupted))
    with pytest.raises(KeyboardInterrupt):
        pool.run()
    assert pool.cancelled.is_set()
    if not started:
        assert not ran  # nothing ran on a thread that never started


def test_the_driver_stops_at_a_lowered_end_and_never_delivers_past_it():
    seg = Segment(0, 0, 10, 0)
    sink = _ListSink()
    counted: list[int] = []

    def chunks():
        yield b"abcd"
        seg.end = 6  # another worker took the tail meanwhile
        yield b"efgh"
        yield b"never read"

    pump(seg, chunks(), sink, lock=threading.Lock(), on_bytes=counted.append)
    assert b"".join(sink.got) == b"abcdef" and seg.pos == 6 and counted == [4, 2]
    assert sink.closed


def test_the_driver_keeps_what_arrived_when_a_check_fails():
    seg = Segment(0, 0, 100, 0)
    sink = _ListSink()

    def deadline() -> None:
        raise TimeoutError("deadline")

    with pytest.raises(TimeoutError):
        pump(seg, iter([b"abc", b"def"]), sink, check=deadline)
    assert sink.got == [b"abc"] and sink.closed  # flushed, so a resume goes on from byte 3


def test_the_driver_drops_a_chunk_that_arrives_after_the_stop():
    """A read blocked when the run stopped was woken by the abort that shut its connection:
    what it returned (a TLS socket's queued ciphertext) never reaches the sink."""
    seg = Segment(0, 0, 100, 0)
    sink = _ListSink()
    stopped = threading.Event()

    def chunks():
        yield b"abc"
        stopped.set()  # another segment failed for good while this read waited
        yield b"garbage"

    pump(seg, chunks(), sink, stop=stopped.is_set)
    assert sink.got == [b"abc"] and seg.pos == 3 and sink.closed


def test_a_parts_plan_hands_out_its_parts_then_steals_only_well_ahead_of_a_near_read():
    plan = Plan.parts(total=40 * MIB, part=16 * MIB, steal_bytes=4 * MIB)
    assert [(s.start, s.end) for s in plan.pending] == [
        (0, 16 * MIB),
        (16 * MIB, 32 * MIB),
        (32 * MIB, 40 * MIB),
    ]
    first = plan.take(steal=True)
    assert first is not None and first.start == 0 and plan.written() == []
    plan.pending.clear()
    first.owned, first.asked, first.pos = True, 16 * MIB, 4 * MIB  # a bounded part, read to 4
    assert plan.take(steal=True, near=True) is None  # a near store sent those already
    stolen = plan.take(steal=True)
    assert stolen is not None and (stolen.start, stolen.end) == (10 * MIB, 16 * MIB)
    assert first.end == 10 * MIB and not plan.done()


def test_a_retried_segment_resumes_from_what_was_written_and_counts_its_resend():
    seg = Segment(0, 0, 100, 0)
    asked: list[int] = []
    lost: list[int] = []
    throttled: list[object] = []

    def attempt(seg: Segment) -> str:
        asked.append(seg.pos)
        if len(asked) == 1:
            seg.pos, seg.written = 60, 40  # 20 bytes delivered never reached the sink
            raise ConnectionError("cut")
        assert seg.resend() and not seg.resend()  # the retry is one attempt, counted once
        seg.pos = seg.written = seg.end
        return "done"  # the attempt's result is retry_segment's

    policy = RetryPolicy(attempts=3, initial=0.0, jitter="none")
    result = retry_segment(
        seg, attempt, policy, ConnectionError, throttle=throttled.append, on_lost=lost.append
    )
    assert result == "done" and asked == [0, 40] and lost == [20] and len(throttled) == 1


def test_a_worker_hands_back_what_was_given_back_and_stops_at_completion_or_a_failure():
    plan = Plan.parts(total=3 * MIB, part=MIB, steal_bytes=MIB)
    lock, stop, asked = threading.Lock(), threading.Event(), []
    take, retried = (lambda: plan.take(steal=False)), (lambda seg, attempt: attempt(seg))

    def attempt(seg: Segment) -> bool:
        assert seg.owned
        asked.append(seg.pos)  # the controller takes the second range back halfway, once
        seg.pos = seg.written = seg.end if len(asked) != 2 else seg.pos + MIB // 2
        return len(asked) == 5  # then that fifth range completes the file

    assert not work_through(plan, take(), attempt, retried, lock, stop, take)
    assert asked == [0, MIB, 2 * MIB, MIB + MIB // 2]  # the rest of the second, from its end
    assert plan.done() and not any(s.owned for s in plan.segments)
    plan = Plan.parts(total=3 * MIB, part=MIB, steal_bytes=MIB)
    assert work_through(plan, take(), attempt, retried, lock, stop, take)  # asked[4]: the end
    assert len(plan.pending) == 2
    stop.set()  # a run that stops keeps nothing pending for a next worker
    asked.clear()
    assert not work_through(plan, take(), attempt, retried, lock, stop, take)
    assert asked == [MIB, 2 * MIB] and not plan.pending and not plan.done()

    def fails(seg: Segment) -> bool:
        raise ConnectionError("cut")

    plan, stop = Plan.parts(total=MIB, part=MIB, steal_bytes=MIB), threading.Event()
    with pytest.raises(ConnectionError):
        work_through(plan, first := take(), fails, retried, lock, stop, take)
    assert first is not None and not first.owned and not plan.pending


def test_the_throttle_rule_is_a_429_or_a_503():
    class Status(Exception):
        def __init__(self, status: int) -> None:
            self.status = status

    assert throttles(Status(429)) and throttles(Status(503))
    assert not throttles(Status(500)) and not throttles(ConnectionError()) and not throttles(None)


def test_the_helper_sink_writes_in_order_moves_written_and_stops_at_a_failure():
    seg = Segment(10, 10, 100, 10)
    landed: list[tuple[int, bytes]] = []
    hashed: list[int] = []

    def write(block: list[bytes], offset: int) -> None:
        if offset >= 16:
            raise OSError("disk full")
        landed.append((offset, b"".join(block)))

    sink = HelperSink(seg, write, then=lambda _block, offset: hashed.append(offset), batch=3)
    for chunk in (b"ab", b"cd", b"ef", b"gh", b"ij"):
        sink.write(chunk)
    with pytest.raises(OSError, match="disk full"):
        sink.close()
    # batches of 3 bytes or more at their offsets, each hashed once written; the last (at 18)
    # failed, and written stops before it
    assert landed == [(10, b"abcd"), (14, b"efgh")]
    assert seg.written == 18 and hashed == [10, 14]


def test_a_body_earns_its_time_by_the_bytes_that_came():
    """The one rule the S3 store's bodies and retry-fetch's share (gpuci.ranged._pace): a
    first-byte grace of one timeout, then a second per min_rate bytes; 0 turns it off."""
    import math

    from gpuci.ranged._pace import body_due

    assert body_due(100.0, 30.0, 0, 1024.0) == 130.0
    assert body_due(100.0, 30.0, 2048, 1024.0) == 132.0
    assert body_due(100.0, 30.0, 1 << 40, 0.0) == math.inf
