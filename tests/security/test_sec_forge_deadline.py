"""The forge REST client (sticky comment, MR note, runner quarantine) ends every request by a
deadline, and a whole listing by one (a review reproduced the hang).

httpx's timeouts bound each read, so an API that answers ``103 Early Hints`` forever, or
trickles its headers a byte at a time, held the report step open without end. Here the server
gives up by itself after ``hostile_http.TRICKLE_FOR`` seconds (so a client without a deadline
ends too, with another error); the client must end first, with one line naming its deadline.
No test measures time.
"""

from __future__ import annotations

import time

import pytest
from hostile_http import Handler, HostileServer, Route, endless_early_hints, trickled_headers

from gpuci.errors import InfraError
from gpuci.forges import _rest as rest
from gpuci.forges._github import GitHub

TIMEOUT = 0.5  # each read; one request's deadline is REQUEST_TIMEOUTS of these (1.5 s)
TOKEN = "ghp_" + "t" * 36


def slow_endless_pages(delay: float) -> Route:
    """A page of nothing after ``delay`` (each well within a request's deadline), linking a
    next page without end."""

    def route(h: Handler) -> None:
        time.sleep(delay)
        page = len(h.server_ref.requests()) + 1
        link = f"<{h.server_ref.url('/api/v3/repos/o/r/issues/1/comments')}?page={page}>"
        h.reply(200, b"[]", {"Content-Type": "application/json", "Link": f'{link}; rel="next"'})

    return route


def client(evil: HostileServer) -> GitHub:
    return GitHub(evil.url("/api/v3"), TOKEN, "o/r", timeout=TIMEOUT, attempts=1)


@pytest.mark.parametrize("route", [trickled_headers, endless_early_hints], ids=["headers", "1xx"])
def test_a_request_ends_by_its_deadline_however_the_answer_trickles(evil, route):
    evil.route("/api/v3/user", route())
    with client(evil) as gh, pytest.raises(InfraError) as info:
        gh.identity()  # who the token is: the sticky comment's first question
    line = info.value.one_line()
    assert "the deadline of 1.5s passed" in line, line  # three timeouts, from the first byte
    assert TOKEN not in line


def test_a_whole_listing_ends_by_one_deadline(evil, monkeypatch):
    """Each page within its own deadline, but pages without end: the listing's deadline
    (LISTING_TIMEOUTS timeouts) ends it long before MAX_PAGES."""
    monkeypatch.setattr(rest, "LISTING_TIMEOUTS", 4)  # 2 s: at most twenty pages
    # 0.1 s a page: far inside the 0.5 s read timeout even when a busy machine is late
    evil.route("/api/v3/repos/o/r/issues/1/comments", slow_endless_pages(0.1))
    with client(evil) as gh, pytest.raises(InfraError) as info:
        list(gh.ours(1, "<!-- m -->"))
    line = info.value.one_line()
    assert "the deadline of 2s passed" in line, line
    assert 1 < len(evil.requests()) < rest.MAX_PAGES


@pytest.mark.parametrize("route", [trickled_headers, endless_early_hints], ids=["headers", "1xx"])
def test_a_runpod_request_ends_by_its_deadline_however_the_answer_trickles(evil, route):
    """The RunPod client had the forge client's flaw: its body's deadline started only once
    the headers were in (``pods up`` and ``reap`` talk to it; a cancel's cleanup too)."""
    import dataclasses

    from gpuci.pods._runpod import client as runpod

    evil.route("/v1/pods", route())
    once = dataclasses.replace(runpod.RETRY_POLICY, attempts=1)
    api = runpod.RunPodClient(TOKEN, evil.url("/v1"), timeout=TIMEOUT, policy=once)
    with api, pytest.raises(Exception) as info:
        api.request("GET", "/pods", "list pods")
    assert "the deadline of 1.5s passed" in str(info.value), info.value  # three timeouts
    assert TOKEN not in str(info.value)
