"""RunPod's ``Retry-After`` read by gpuci.retry's parser: garbage is ignored, dates count."""

from __future__ import annotations

import email.utils
import io
import math
import time

import pytest

from gpuci.pods._runpod.client import MAX_RETRY_AFTER_S, RunPodClient, Transient
from gpuci.pods.health import _replace as replace
from gpuci.runtime import Runtime


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


# ----- a phase's deadline bounds the waits inside each of its requests ------------------------
UP = dict(image="img", command="serve", ttl="30m", timeout="5m")
BUSY = [(429, {"Retry-After": "300"})] * 5  # RunPod throttling: five 5-minute waits per request


def test_a_retry_after_that_would_end_past_the_deadline_is_not_waited(fake, clock):
    fake.fail("GET /v2/pods", (429, {"Retry-After": "300"}), (429, {"Retry-After": "30"}))
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c:
        with pytest.raises(Transient, match=r"HTTP 429.*its retry would end past the timeout"):
            c.list_pods(deadline=clock.now() + 60)
        assert clock.sleeps == []  # 300 s would end past the deadline: not started
        assert c.list_pods(deadline=clock.now() + 60) == []  # 30 s fits: waited, then retried
    assert clock.sleeps == [30.0]


def test_placement_timeout_bounds_the_retry_after_of_each_create(fake, run, clock):
    """``placement-timeout 1m`` with RunPod answering 429 ``Retry-After: 300``: each create
    waited 5 x 300 s, so up ran 25 minutes per candidate past a 1-minute placement timeout."""
    fake.fail("POST /v2/pods", *BUSY)
    start = clock.now()
    res = run("up", **UP, placement_timeout="1m", gpu_types="NVIDIA GeForce RTX 4090,NVIDIA L40S")
    assert clock.now() - start <= 60 and 300 not in clock.sleeps  # was 25 minutes
    assert res.code == 3, res.stdout
    line = res.json["headline"]  # the cause (RunPod's 429, its wait past the timeout), the fix
    assert "create pod on NVIDIA GeForce RTX 4090: HTTP 429" in line
    assert "its retry would end past the timeout" in line and "placement-timeout" in line
    assert not [p for p in fake.pods.values() if p["status"] != "TERMINATED"]


def test_a_retry_after_inside_the_placement_timeout_is_still_waited(fake, run, clock):
    fake.fail("POST /v2/pods", *[(429, {"Retry-After": "20"})] * 2)
    res = run("up", **UP, placement_timeout="1m", gpu_types="NVIDIA L40S")
    assert res.code == 0, res.stdout
    assert clock.sleeps[:2] == [20.0, 20.0] and len(fake.calls("POST", "/v2/pods")) == 3


def test_timeout_bounds_the_retry_after_of_each_poll_for_running(fake, run, clock):
    fake.fail(r"GET /v2/pods/.*", *BUSY)
    start = clock.now()
    res = run("up", **UP, gpu_types="NVIDIA L40S")
    assert clock.now() - start <= 5 * 60 and 300 not in clock.sleeps  # was 25 minutes
    assert res.code == 3 and "HTTP 429" in res.json["headline"], res.stdout


def test_retries_that_run_out_before_the_deadline_say_so_as_before(fake, clock):
    fake.fail("GET /v2/pods", *[(503, {})] * 6)
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c, pytest.raises(Transient) as err:
        c.list_pods(deadline=clock.now() + 3600)
    assert len(clock.sleeps) == 5 and "past the timeout" not in err.value.one_line()


def test_the_wait_for_a_smoke_verdict_bounds_the_retry_after_of_each_poll(fake, clock):
    """The last poll of ``up`` without a runner (its pod's smoke verdict): each read waited
    5 x 300 s under RunPod's throttling, whatever the job's timeout."""
    pod_id = fake.hand_made("smoking", status="RUNNING")
    fake.fail(rf"GET /v2/pods/{pod_id}", *BUSY)
    rt = Runtime({"GPUCI_PODS_POLL_S": "5"}, json_mode=True, stdout=io.StringIO())
    with RunPodClient(fake.api_key, fake.url, clock=clock) as c, pytest.raises(Transient) as err:
        replace.wait_verdict(c, clock, pod_id, clock.now() + 60, rt)
    assert 300 not in clock.sleeps and "past the timeout" in err.value.one_line()
