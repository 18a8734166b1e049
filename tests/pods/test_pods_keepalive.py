"""The client over kept-alive connections, as RunPod's front end serves them (HTTP/1.1, idle
connections closed by the server): a connection closed under a request the server never read,
an answer with an empty body, an answer cut short. Each ends in the right result or one line,
never a traceback, never a second pod.

The fake (:mod:`fake_runpod_wire`) scripts each case on the wire; ``clock.sleeps`` shows every
retry's backoff, so a retry that should not have waited (or should not have happened) shows.
"""

from __future__ import annotations

import time

import pytest
from pods_testing import FakeClock, serve_scripted

from gpuci.pods._runpod.client import RunPodClient, RunPodError

BODY = {"name": "t-keepalive", "image": "img", "gpu": {"id": "NVIDIA L40S", "count": 1}}
UP = dict(gpu_types="NVIDIA L40S", image="img", command="serve", ttl="45m", owner="alice")
DAY = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")
READS = {
    "GET /v2/pods": lambda c: c.list_pods(),
    "GET /v2/billing/pods": lambda c: c.pod_billing(*DAY),
}


def client(fake, clock) -> RunPodClient:
    return RunPodClient(fake.api_key, fake.url, clock=clock)


def test_a_pods_run_reuses_its_connections(fake, run):
    """The fake keeps connections alive, so every pods test exercises the client's reuse."""
    res = run("up", **UP)
    assert res.code == 0, res.stdout
    assert fake.wire.reused > 0 and fake.wire.connections < len(fake.requests)


def test_a_get_on_a_connection_the_server_closed_is_resent_at_once(fake, clock):
    """The server closed the kept-alive connection as the client reused it: the request was
    never read, so it is sent again on a new connection, with no backoff (RunPod is not
    unhealthy); before, it waited 1-2 s as for a 5xx."""
    fake.wire.drop_reused.append("GET /v2/pods")
    with client(fake, clock) as c:
        assert c.list_pods() == []  # a new connection: answered
        assert c.list_pods() == []  # the kept-alive one: closed unread, then a new one
    assert fake.wire.dropped == ["GET /v2/pods"]
    assert len(fake.calls("GET", "/v2/pods")) == 2 and clock.sleeps == []


def test_a_create_on_a_connection_the_server_closed_makes_one_pod(fake, clock):
    """The create was never read: its retry looks for the pod by name first (none), then
    creates it once, at once."""
    fake.wire.drop_reused.append("POST /v2/pods")
    with client(fake, clock) as c:
        c.list_gpu_types()  # opens the connection the create then reuses
        pod = c.create_pod(BODY)
    assert fake.wire.dropped == ["POST /v2/pods"] and list(fake.pods) == [pod["id"]]
    assert [r.method for r in fake.requests[1:]] == ["GET", "POST"]  # looked, then created
    assert clock.sleeps == []


def test_a_closed_connection_near_the_placement_deadline_still_places(fake, clock):
    """Half a second of placement left: a backoff of 1-2 s would end past it and fail the
    create; a connection the server closed unread needs no wait."""
    fake.wire.drop_reused.append("POST /v2/pods")
    with client(fake, clock) as c:
        c.list_gpu_types()
        pod = c.create_pod(BODY, deadline=clock.now() + 0.5)
    assert list(fake.pods) == [pod["id"]]


def test_up_over_a_connection_the_server_closed_places_one_pod_without_a_retry_wait(
    fake, run, clock
):
    """fresh62's "one extra retry sleep, 1.3 s" in ``pods up``, on purpose: the create meets a
    connection the server closed; one pod, and only the poll's wait."""
    fake.wire.drop_reused.append("POST /v2/pods")
    res = run("up", **UP)
    assert res.code == 0, res.stdout
    assert fake.wire.dropped == ["POST /v2/pods"] and list(fake.pods) == [res.outputs["pod-id"]]
    assert clock.sleeps == [5.0], [(r.method, r.path, r.status) for r in fake.requests]


def test_a_create_whose_answer_is_cut_short_makes_one_pod(fake, clock):
    """The server made the pod, and its answer was cut under it: the retry finds the pod by
    its name and never posts again."""
    fake.wire.garble("POST /v2/pods", "cut")
    with client(fake, clock) as c:
        pod = c.create_pod(BODY)
    assert list(fake.pods) == [pod["id"]] and len(fake.calls("POST", "/v2/pods")) == 1
    assert len(clock.sleeps) == 1  # a transport failure after the server read it: backoff


@pytest.mark.parametrize("route", list(READS))
def test_a_get_whose_answer_is_cut_short_is_read_again(fake, clock, route):
    fake.wire.garble(route, "cut")
    with client(fake, clock) as c:
        assert READS[route](c) == []
    assert len(fake.calls(*route.split())) == 2 and len(clock.sleeps) == 1


@pytest.mark.parametrize("route", list(READS))
def test_an_empty_200_is_one_line(fake, clock, route):
    fake.wire.garble(route, "empty")
    with client(fake, clock) as c, pytest.raises(RunPodError) as err:
        READS[route](c)
    assert "HTTP 200 with an empty body, no JSON" in err.value.one_line()
    assert "\n" not in err.value.one_line() and err.value.exit_code == 3


def test_up_whose_create_answers_201_with_no_body_leaves_no_pod(fake, run):
    """The pod was made but its answer is empty: one line, exit 3, and the cleanup finds the
    pod by its name and ends it; nothing was posted twice."""
    fake.wire.garble("POST /v2/pods", "empty")
    res = run("up", **UP)
    assert res.code == 3 and "HTTP 201 with an empty body" in res.json["headline"], res.stdout
    assert "\n" not in res.json["headline"]
    assert len(fake.calls("POST", "/v2/pods")) == 1 and fake.pods == {}


def test_the_fake_closes_an_idle_connection_and_the_client_opens_another(fake, clock):
    """What the front end does between a job's polls; the client sees a closed connection in
    its pool and never sends on it."""
    fake.wire.idle_close_s = 0.05
    with client(fake, clock) as c:
        assert c.list_pods() == []
        for _ in range(1000):  # until the server has closed it
            if fake.wire.idle_closed:
                break
            time.sleep(0.01)
        assert c.list_pods() == []
    assert fake.wire.connections == 2 and clock.sleeps == []


def test_a_new_connection_closed_unanswered_keeps_the_backoff():
    """Only a reused connection is presumed closed as idle: a new one the server read from and
    closed with no answer (a crash, an overload) is RunPod unhealthy, and waits as a 5xx does."""
    whole = b'{"pods": []}'
    url = serve_scripted((b"", b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n" + whole))
    clock = FakeClock()
    with RunPodClient("rpa_test", url, clock=clock) as c:
        assert c.list_pods() == []
    assert len(clock.sleeps) == 1 and 1 <= clock.sleeps[0] <= 2
