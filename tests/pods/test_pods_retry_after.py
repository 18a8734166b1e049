"""RunPod's ``Retry-After`` read by gpuci.retry's parser: garbage is ignored, dates count."""

from __future__ import annotations

import email.utils
import math
import time

import pytest

from gpuci.pods._runpod.client import MAX_RETRY_AFTER_S, RunPodClient


@pytest.mark.parametrize("garbage", ["nan", "NaN", "-5", "inf", "", "soon", "1e3"])
def test_a_garbage_retry_after_backs_off_instead(fake, clock, garbage):
    """``float(raw)`` read "nan" as a NaN sleep (a traceback on time.sleep) and "-5" as 0."""
    fake.fail("GET /v2/pods", (429, {"Retry-After": garbage}))
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c:
        assert c.list_pods() == []
    assert len(clock.sleeps) == 1 and math.isfinite(clock.sleeps[0])
    assert 1.0 <= clock.sleeps[0] <= 2.0  # the 5xx backoff: 1 s plus up to 1 s of jitter


def test_an_http_date_retry_after_is_honoured(fake, clock):
    when = email.utils.formatdate(time.time() + 40, usegmt=True)
    fake.fail("GET /v2/pods", (429, {"Retry-After": when}))
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c:
        assert c.list_pods() == []
    assert len(clock.sleeps) == 1 and 30.0 <= clock.sleeps[0] <= 40.0


def test_a_huge_retry_after_is_capped(fake, clock):
    fake.fail("GET /v2/pods", (429, {"Retry-After": "9" * 40}))
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c:
        assert c.list_pods() == []
    assert clock.sleeps == [MAX_RETRY_AFTER_S]
