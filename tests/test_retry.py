"""gpuci.retry: the one Retry-After parser and the policy every client's retries are built from."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from gpuci.retry import (
    MAX_RETRY_AFTER,
    RetryPolicy,
    aws_max_attempts,
    botocore_delay,
    parse_retry_after,
)

NOW = 1445412470.0  # Wed, 21 Oct 2015 07:27:50 GMT


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 10.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-15 07:28:00 GMT", 10.0),  # obsolete RFC 850
        ("Wed Oct 21 07:28:00 2015", 10.0),  # obsolete asctime: no zone, read as UTC
        ("Wed, 21 Oct 2015 07:28:00 -0000", 10.0),
        ("Wed, 21 Oct 2015 09:28:00 +0200", 10.0),
        ("Wed, 21 Oct 2015 07:00:00 GMT", 0.0),  # in the past: now
    ],
)
def test_both_forms_are_read(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "-5",
        "+5",
        "1e3",
        "0x10",
        "soon",
        "5 s",
        "1" * 65,
        "Wed, 32 Oct 2015 07:28:00 GMT",
        "Wed, 21 Foo 2015 07:28:00 GMT",
        "5\r\nX-Evil: 1",
    ],
)
def test_garbage_is_ignored(value):
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize(
    "value",
    ["9" * 40, "1" * 64, "100000", "Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 2099 0:0:0 GMT"],
)
def test_a_huge_wait_is_capped(value):
    assert parse_retry_after(value, now=NOW) == MAX_RETRY_AFTER
    assert parse_retry_after(value, now=NOW, cap=60) == 60


def test_every_answer_is_a_finite_number_or_none():
    odd = ["nan", "inf", "1" * 64, "Sat, 01 Jan 0001 00:00:00 GMT", "Mon, 01 Jan 1900 00:00:00 GMT"]
    for value in odd:
        got = parse_retry_after(value, now=NOW)
        assert got is None or (math.isfinite(got) and 0 <= got <= MAX_RETRY_AFTER), value


def test_backoff_shapes():
    full = RetryPolicy(initial=1, max_wait=20, jitter="full")
    assert [full.backoff(n, rand=lambda: 1.0) for n in (1, 2, 3, 5, 6, 40)] == [1, 2, 4, 16, 20, 20]
    assert full.backoff(3, rand=lambda: 0.0) == 0
    none = RetryPolicy(initial=0.25, max_wait=4, jitter="none")
    assert [none.backoff(n) for n in (1, 2, 3, 4, 5, 6)] == [0.25, 0.5, 1, 2, 4, 4]
    additive = RetryPolicy(initial=1, max_wait=30, jitter="additive")
    assert additive.backoff(2, rand=lambda: 0.5) == 2.5
    assert additive.backoff(10**6, rand=lambda: 1.0) == 30  # no overflow, capped


class _Wish(Exception):
    def __init__(self, retry_after):
        super().__init__("x")
        self.retry_after = retry_after


def test_a_failure_s_retry_after_replaces_the_backoff_capped():
    policy = RetryPolicy(initial=1, max_wait=5, jitter="none", retry_after_cap=60)
    assert policy.delay(1, _Wish(30.0)) == 30
    assert policy.delay(1, _Wish(3600.0)) == 60
    assert policy.delay(1, _Wish(-3.0)) == 0
    assert policy.delay(2, _Wish(float("nan"))) == 2  # never a NaN sleep
    assert policy.delay(2, _Wish(None)) == 2
    assert policy.delay(2, ValueError()) == 2
    ignoring = RetryPolicy(initial=1, max_wait=5, jitter="none", retry_after_cap=None)
    assert ignoring.delay(1, _Wish(30.0)) == 1


def test_retrying_retries_what_it_names_and_reraises_the_last():
    sleeps: list[float] = []
    heard: list[BaseException | None] = []
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _Wish(0.5)
        return "ok"

    policy = RetryPolicy(attempts=3, initial=1, jitter="none")
    assert policy.retrying(_Wish, sleep=sleeps.append, on_retry=heard.append)(flaky) == "ok"
    assert sleeps == [0.5, 0.5] and len(heard) == 2 and isinstance(heard[0], _Wish)

    def broken() -> None:
        raise KeyError("no")

    calls.clear()
    with pytest.raises(KeyError):
        policy.retrying(lambda exc: isinstance(exc, _Wish), sleep=sleeps.append)(broken)

    def always() -> None:
        calls.append(1)
        raise _Wish(None)

    calls.clear()
    with pytest.raises(_Wish):
        policy.retrying(_Wish, sleep=lambda _s: None)(always)
    assert len(calls) == 3


def test_a_deadline_stops_before_a_wait_that_would_pass_it():
    calls = []

    def always() -> None:
        calls.append(1)
        raise _Wish(50.0)

    policy = RetryPolicy(attempts=10, retry_after_cap=100)
    with pytest.raises(_Wish):
        policy.retrying(_Wish, deadline=10, sleep=lambda _s: None)(always)
    assert len(calls) == 1


def test_a_deadline_on_the_callers_clock():
    """A fake clock's sleep moves only its own time: the deadline is read on that clock
    (15, 30 and 60 s rounds fit in 120 s; the 120 s wait after them would end past it)."""
    clock = [1000.0]
    calls = []

    def nothing_placed() -> None:
        calls.append(clock[0])
        raise _Wish(None)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    policy = RetryPolicy(attempts=100, initial=15, max_wait=300, jitter="none")
    with pytest.raises(_Wish):
        policy.retrying(_Wish, deadline=120, sleep=sleep, now=lambda: clock[0])(nothing_placed)
    assert calls == [1000.0, 1015.0, 1045.0, 1105.0]


def test_botocore_standard_mode():
    """A drop-in for the hand-written loop: rand() * min(20, 2 ** (attempt - 1))."""
    assert [botocore_delay(n, rand=lambda: 1.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 20, 20]
    assert botocore_delay(4, rand=lambda: 0.25) == 2
    assert aws_max_attempts({}) == 8
    assert aws_max_attempts({"AWS_MAX_ATTEMPTS": " 3 "}) == 3
    assert aws_max_attempts({"AWS_MAX_ATTEMPTS": "0"}) == 1
    assert aws_max_attempts({"AWS_MAX_ATTEMPTS": "lots"}) == 8


def test_importing_it_is_cheap():
    """A warm restore imports this module (tests/cache/test_startup.py): no tenacity, and the
    email package, datetime and random only once used."""
    probe = (
        "import sys, json, gpuci.retry as r\n"
        "r.parse_retry_after('120'); r.RetryPolicy(jitter='none').backoff(3)\n"
        "first = sorted(sys.modules)\n"
        "r.parse_retry_after('Wed, 21 Oct 2015 07:28:00 GMT')\n"
        "print(json.dumps([first, sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    first, then = json.loads(out.stdout)
    assert not {"tenacity", "email.utils", "random", "datetime"} & set(first)
    assert "tenacity" not in then and "email.utils" in then


def test_call_runs_as_retrying_does():
    """The same waits, ``on_retry`` and attempt count as the tenacity controller (the first
    failure is replayed to it), the last failure raised, a result handed back."""
    sleeps: list[float] = []
    heard: list[BaseException | None] = []
    calls = []

    def always() -> None:
        calls.append(1)
        raise _Wish(None)

    policy = RetryPolicy(attempts=4, initial=1, jitter="none")
    with pytest.raises(_Wish):
        policy.call(always, _Wish, sleep=sleeps.append, on_retry=heard.append)
    assert len(calls) == 4 and sleeps == [1, 2, 4] and len(heard) == 3

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise _Wish(0.5)
        return "ok"

    calls.clear()
    assert policy.call(flaky, lambda exc: isinstance(exc, _Wish), sleep=sleeps.append) == "ok"
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(_Wish):
        RetryPolicy(attempts=1).call(always, _Wish, sleep=sleeps.append)
    assert len(calls) == 1


def test_call_s_deadline_counts_from_the_first_attempt():
    """A first attempt that took 100 s of a 120 s deadline leaves room for one 15 s wait,
    not for the 30 s one after it."""
    clock = [0.0]
    calls = []

    def slow_then_fast() -> None:
        calls.append(clock[0])
        clock[0] += 100.0 if len(calls) == 1 else 0.0
        raise _Wish(None)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    policy = RetryPolicy(attempts=10, initial=15, max_wait=300, jitter="none")
    with pytest.raises(_Wish):
        policy.call(slow_then_fast, _Wish, deadline=120, sleep=sleep, now=lambda: clock[0])
    assert calls == [0.0, 115.0]


def test_call_imports_tenacity_only_once_a_retry_is_needed():
    """A warm restore's one ref GET goes through ``call`` (tests/cache/test_startup.py): a first
    success, or a failure not retried, must not load tenacity (nor logging, which it imports)."""
    probe = (
        "import sys, json\n"
        "from gpuci.retry import RetryPolicy\n"
        "p = RetryPolicy(attempts=3, jitter='none')\n"
        "assert p.call(lambda: 'ok', OSError) == 'ok'\n"
        "def bad(): raise KeyError('x')\n"
        "try: p.call(bad, OSError)\n"
        "except KeyError: pass\n"
        "first = sorted(sys.modules)\n"
        "n = []\n"
        "def flaky():\n"
        "    n.append(1)\n"
        "    if len(n) == 1: raise OSError('reset')\n"
        "    return 'again'\n"
        "assert p.call(flaky, OSError, sleep=lambda s: None) == 'again'\n"
        "print(json.dumps([first, sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    first, then = json.loads(out.stdout)
    assert not {"tenacity", "logging", "concurrent.futures"} & set(first)
    assert "tenacity" in then


@pytest.mark.parametrize(
    ("last_try", "expected"),
    [(1.0, [0.0, 15.0, 45.0, 105.0, 119.0]), (None, [0.0, 15.0, 45.0, 105.0])],
)
def test_near_the_deadline_the_last_wait_shrinks_and_one_more_attempt_runs(last_try, expected):
    """Throttled near its deadline, a policy with ``last_try`` cuts the wait that would pass it
    to leave ``last_try`` seconds and tries once more (as the old S3 loop did): 15, 30 and 60 s
    fit in 120 s; the 120 s wait after them shrinks to 14 s; then only 1 s is left, and it
    stops. Without ``last_try`` it stops before that wait (one attempt fewer)."""
    clock = [0.0]
    calls: list[float] = []

    def throttled() -> None:
        calls.append(clock[0])
        raise _Wish(None)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    policy = RetryPolicy(attempts=100, initial=15, max_wait=300, jitter="none", last_try=last_try)
    with pytest.raises(_Wish):
        policy.call(throttled, _Wish, deadline=120, sleep=sleep, now=lambda: clock[0])
    assert calls == expected
    assert clock[0] <= 120.0


def test_the_last_try_is_skipped_when_too_little_is_left_for_it():
    """A first attempt that ate all but half a second of the deadline leaves no room for a
    last try worth 1 s: no wait, no second attempt; a Retry-After past the deadline shrinks
    the same way as a backoff does."""
    clock = [0.0]
    calls: list[float] = []

    def slow() -> None:
        calls.append(clock[0])
        clock[0] += 9.5
        raise _Wish(None)

    policy = RetryPolicy(attempts=5, initial=1, jitter="none", last_try=1.0)
    with pytest.raises(_Wish):
        policy.call(slow, _Wish, deadline=10, sleep=lambda s: None, now=lambda: clock[0])
    assert calls == [0.0]

    clock[0], waits = 0.0, []

    def asks_for_a_minute() -> None:
        calls.append(clock[0])
        raise _Wish(60.0)

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock[0] += seconds

    calls.clear()
    policy = RetryPolicy(attempts=5, initial=1, jitter="none", last_try=1.0, retry_after_cap=300)
    with pytest.raises(_Wish):
        policy.call(asks_for_a_minute, _Wish, deadline=10, sleep=sleep, now=lambda: clock[0])
    assert calls == [0.0, 9.0] and waits == [9.0]


def test_the_s3_client_s_policy_keeps_its_last_try():
    from gpuci.retry import BOTOCORE_STANDARD

    assert BOTOCORE_STANDARD.last_try == 1.0


def test_a_cancel_ends_a_retrys_wait_and_no_attempt_follows():
    """``cancel`` (retry-fetch's Ctrl-C with several files) cuts a ten-minute backoff short:
    the controller raises Interrupted at once instead of sleeping it out and trying again."""
    import threading

    from gpuci.retry import Interrupted
    from gpuci_testing import outcome_in_thread

    cancel = threading.Event()
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        threading.Timer(0.2, cancel.set).start()  # Ctrl-C while the controller waits
        raise ValueError("503")

    policy = RetryPolicy(attempts=3, initial=600.0, max_wait=600.0, jitter="none")
    outcome = outcome_in_thread(lambda: policy.call(flaky, ValueError, cancel=cancel), 30)
    assert outcome, "the retry still waited 30 s after its cancel"
    assert len(calls) == 1 and isinstance(outcome[0], Interrupted), outcome
