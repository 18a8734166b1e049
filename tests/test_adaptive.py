"""The concurrency controller, driven by a fake clock and a simulated link."""

from __future__ import annotations

import threading

import pytest

from gpuci.adaptive import Concurrency

# How long a thread's step may take before the test calls it hung: sized for a busy CI
# machine, and only ever waited in full when something is broken.
HANG_S = 60


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(ctl: Concurrency, clock: FakeClock, rate_for, windows: int = 12) -> list[int]:
    """Fill every allowed slot, then move bytes at ``rate_for(limit)`` for several windows."""
    limits = []
    held = []
    for _ in range(windows):
        while len(held) < ctl.limit:
            cm = ctl.slot()
            cm.__enter__()
            held.append(cm)
        while len(held) > ctl.limit:
            held.pop().__exit__(None, None, None)
        limits.append(ctl.limit)
        for _ in range(10):
            clock.now += ctl.window_s / 5
            ctl.record(int(rate_for(ctl.limit) * ctl.window_s / 5))
    for cm in held:
        cm.__exit__(None, None, None)
    return limits


def test_grows_while_throughput_rises_then_settles_at_the_plateau() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=64, reprobe_s=None, clock=clock)
    # a remote-like link: 16 MiB/s per connection until 24 connections fill a 384 MiB/s pipe
    drive(ctl, clock, lambda n: min(n, 24) * 16 << 20, windows=16)
    assert ctl.settled
    assert ctl.limit == 32  # 4 -> 8 -> 16 -> 32 (+50%), 64 gains nothing: back to 32
    assert ctl.peak == 64


def test_cpu_bound_link_stays_low() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=32, reprobe_s=None, clock=clock)
    drive(ctl, clock, lambda n: 900 << 20)  # more connections add nothing
    assert ctl.settled and ctl.limit == 4 and ctl.peak == 8


def test_never_passes_the_ceiling() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=2, ceiling=6, clock=clock)
    drive(ctl, clock, lambda n: n << 20)  # linear gains forever
    assert ctl.limit == 6 and ctl.peak == 6 and ctl.settled


def test_throttling_halves_and_stops_growth() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=16, ceiling=64, clock=clock)
    ctl.throttled()
    assert ctl.limit == 8 and ctl.settled and ctl.throttles == 1
    drive(ctl, clock, lambda n: n << 20)
    assert ctl.limit == 8
    for _ in range(10):
        ctl.throttled()
    assert ctl.limit == 1  # the floor


def test_fixed_count_never_moves() -> None:
    clock = FakeClock()
    ctl = Concurrency.fixed(8)
    ctl._clock = clock
    assert drive(ctl, clock, lambda n: n << 20) == [8] * 12


def test_no_verdict_without_enough_work_to_fill_the_slots() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=64, clock=clock)
    with ctl.slot():  # only one request in flight out of 4 allowed
        for _ in range(20):
            clock.now += 0.1
            ctl.record(100 << 20)
    assert ctl.limit == 4 and not ctl.settled


def test_slots_block_beyond_the_limit() -> None:
    ctl = Concurrency.fixed(2)
    entered = threading.Barrier(3, timeout=HANG_S)  # both holders and the test
    release = threading.Event()

    def hold() -> None:
        with ctl.slot():
            entered.wait()
            release.wait(HANG_S)

    first = [threading.Thread(target=hold) for _ in range(2)]
    for t in first:
        t.start()
    entered.wait()  # both slots taken before the third asks: not left to the scheduler
    third_in = threading.Event()

    def third() -> None:
        with ctl.slot():
            third_in.set()

    t3 = threading.Thread(target=third)
    t3.start()
    assert not third_in.wait(0.3)
    assert ctl.active == 2
    release.set()
    assert third_in.wait(HANG_S)
    for t in [*first, t3]:
        t.join(HANG_S)
    assert ctl.active == 0


@pytest.mark.parametrize("start,ceiling,floor,limit", [(0, 8, 1, 1), (99, 8, 1, 8), (4, 0, 1, 1)])
def test_bounds_are_clamped(start: int, ceiling: int, floor: int, limit: int) -> None:
    assert Concurrency(start=start, ceiling=ceiling, floor=floor).limit == limit


def test_one_burst_of_refusals_halves_once() -> None:
    """32 requests in flight all answered 503 leave 16 connections, not 1 (as in TCP)."""
    ctl = Concurrency.fixed(16)
    inside = threading.Barrier(8)
    refused = threading.Barrier(8)

    def request() -> None:
        with ctl.slot():
            inside.wait(HANG_S)  # all eight began before any cut
            ctl.throttled()
            refused.wait(HANG_S)

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert ctl.limit == 8 and ctl.throttles == 8
    with ctl.slot():  # a request that began after the cut and is refused again: news
        ctl.throttled()
    assert ctl.limit == 4


def test_a_request_refused_twice_halves_twice() -> None:
    ctl = Concurrency.fixed(16)
    with ctl.slot():
        ctl.throttled()  # its retry is a request after the cut
        ctl.throttled()
    assert ctl.limit == 4


def test_one_slow_window_is_not_the_verdict() -> None:
    """A busy machine gives a slow window now and then; the climb goes on past one."""
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=64, clock=clock)

    def rate_for(n: int) -> int:
        # the first window judged at 16 connections (after its warm-up) is slow
        if n == 16 and not ctl._warming and not ctl._level:
            return 1 << 20
        return min(n, 24) * 16 << 20

    drive(ctl, clock, rate_for, windows=16)
    assert ctl.settled and ctl.limit == 32 and ctl.peak == 64


def test_the_first_half_window_after_a_step_is_not_counted() -> None:
    """New connections wait for their first byte: the moments right after a step up are slow
    by nature, and counting them would stop every climb at its first step."""
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=8, patience=1, clock=clock)
    with ctl.slot(), ctl.slot(), ctl.slot(), ctl.slot():
        for _ in range(4):
            clock.now += 0.1
            ctl.record(40 << 20)  # 4 connections: 400 MiB/s
        assert ctl.limit == 8
        slots = [ctl.slot() for _ in range(4)]
        for cm in slots:
            cm.__enter__()
        for _ in range(2):
            clock.now += 0.1
            ctl.record(1 << 20)  # warming up: 10 MiB/s, not held against the step
        assert ctl.limit == 8 and not ctl.settled
        for _ in range(4):
            clock.now += 0.1
            ctl.record(80 << 20)  # 800 MiB/s: the step paid, and 8 is the ceiling
        assert ctl.limit == 8 and ctl.settled and ctl._best_limit == 8
        for cm in slots:
            cm.__exit__(None, None, None)


# ----- issue 28: start from what is known, hold on through a burst, probe again ----------------
def first_bytes(ctl: Concurrency, seconds: float, count: int = 4) -> None:
    for _ in range(count):
        ctl.first_byte(seconds)


def test_a_far_store_jumps_to_the_ceiling_on_its_first_answers() -> None:
    ctl = Concurrency(start=8, ceiling=32, clock=FakeClock())
    first_bytes(ctl, 0.030, 3)
    assert ctl.limit == 8 and ctl.far is None  # three answers are not yet a verdict
    ctl.first_byte(0.031)
    assert ctl.far is True and ctl.limit == 32 and ctl.peak == 32 and ctl.settled


def test_a_far_store_gets_no_more_connections_than_requests() -> None:
    ctl = Concurrency(start=8, ceiling=32, clock=FakeClock())
    ctl.expect(total_bytes=20 << 20, requests=12)
    first_bytes(ctl, 0.040)
    assert ctl.limit == 12 and not ctl.settled  # below the ceiling: the climb goes on


def test_a_near_store_keeps_climbing_window_by_window() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=8, ceiling=32, clock=clock)
    first_bytes(ctl, 0.002)
    assert ctl.far is False and ctl.limit == 8


def test_answers_queued_behind_each_other_do_not_make_a_store_far() -> None:
    ctl = Concurrency(start=8, ceiling=32, clock=FakeClock())
    for seconds in (0.002, 0.250, 0.030, 0.040):  # a single-threaded server's queue
        ctl.first_byte(seconds)
    assert ctl.far is False and ctl.limit == 8


def test_no_jump_after_throttling_or_for_a_fixed_count() -> None:
    ctl = Concurrency(start=8, ceiling=32, clock=FakeClock())
    ctl.throttled()
    first_bytes(ctl, 0.050)
    assert ctl.limit == 4
    fixed = Concurrency.fixed(8)
    first_bytes(fixed, 0.050)
    assert fixed.limit == 8


def test_expect_never_starts_more_connections_than_requests() -> None:
    ctl = Concurrency(start=8, ceiling=32, clock=FakeClock())
    ctl.expect(total_bytes=3 << 20, requests=3)
    assert ctl.limit == 3 and ctl.peak == 3
    fixed = Concurrency.fixed(8)
    fixed.expect(total_bytes=3 << 20, requests=3)
    assert fixed.limit == 8  # the user's count stands


def test_a_burst_of_other_work_for_two_windows_is_not_the_verdict() -> None:
    """Linear gains, but another process takes the CPU for the first two windows after the
    step to 16: with three windows of patience the step still pays."""
    clock = FakeClock()
    ctl = Concurrency(start=8, ceiling=32, reprobe_s=None, clock=clock)
    stepped: list[float] = []

    def rate(n: int) -> int:
        if n == 16:
            stepped[:] = stepped or [clock.now]
            if clock.now - stepped[0] < 1.2:  # the warm-up and the next two windows judged
                return 8 << 20
        return n << 20

    drive(ctl, clock, rate, windows=16)
    assert ctl.limit == 32 and ctl.settled


def test_settled_low_it_probes_again_and_climbs_when_the_link_pays_now() -> None:
    """A verdict taken while the machine was busy (more connections did not pay then) is
    revisited: once the link pays for more, the probe climbs."""
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=32, reprobe_s=2.0, clock=clock)
    drive(ctl, clock, lambda n: 100 << 20, windows=6)  # flat: settles at 4
    assert ctl.settled and ctl.limit == 4 and ctl.reprobes == 0
    drive(ctl, clock, lambda n: n * (16 << 20), windows=24)  # now every connection pays
    assert ctl.reprobes >= 1 and ctl.limit == 32


def test_a_probe_that_does_not_pay_goes_back_and_waits_longer() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=4, ceiling=32, reprobe_s=2.0, clock=clock)
    drive(ctl, clock, lambda n: 100 << 20, windows=40)  # flat throughout: 24 s of transfer
    assert ctl.limit in (4, 8) and ctl.peak == 8
    # probes after 2, 4, 8, 16 s of settling (doubling): a handful, not one every window
    assert 1 <= ctl.reprobes <= 4
    drive(ctl, clock, lambda n: 100 << 20, windows=10)
    assert ctl.limit == 4 or not ctl.settled


def test_no_probe_after_throttling_or_at_the_ceiling() -> None:
    clock = FakeClock()
    ctl = Concurrency(start=8, ceiling=32, clock=clock)
    ctl.throttled()
    drive(ctl, clock, lambda n: n << 20, windows=20)
    assert ctl.limit == 4 and ctl.reprobes == 0
    top = Concurrency(start=4, ceiling=8, clock=clock)
    drive(top, clock, lambda n: n << 20, windows=20)
    assert top.limit == 8 and top.reprobes == 0
