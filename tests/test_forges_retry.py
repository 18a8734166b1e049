"""The forge REST client (GitHub, GitLab) under rate limits: a 429's ``Retry-After`` is waited,
capped, and a garbage one falls back to the backoff (gpuci.retry's one parser); and hostile
bodies: too large or too deep is one line, never a traceback or a body read whole."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from forges.fake_github import FakeGitHub
from gpuci.errors import InfraError
from gpuci.forges import _rest as rest
from gpuci.forges._github import GitHub


class _RateLimited(FakeGitHub):
    """The fake GitHub answering the queued (status, headers[, raw body]) first; ``seen``
    counts the requests it got."""

    def __init__(self, *answers: tuple[Any, ...]) -> None:
        super().__init__()
        for status, headers, *body in answers:
            answer = body[0] if body else {"message": "slow down"}
            self.state.answer_first.append((status, headers, answer))

    @property
    def seen(self) -> int:
        return len(self.state.requests)


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The waits the retry controller asked for (time.sleep is read when it is built)."""
    asked: list[float] = []
    monkeypatch.setattr(time, "sleep", asked.append)
    return asked


def _comments(server: FakeGitHub, **kwargs: Any) -> list[dict[str, Any]]:
    with GitHub(server.github_api, server.state.github_token, "o/r", **kwargs) as gh:
        return list(gh.ours(1, "<!-- m -->"))


def test_a_429_waits_its_retry_after(sleeps):
    with _RateLimited((429, {"Retry-After": "7"}), (503, {"Retry-After": "2"})) as server:
        assert _comments(server) == []
    assert server.seen == 3 and sleeps == [7.0, 2.0]


def test_a_retry_after_past_the_cap_is_cut_to_it(sleeps):
    with _RateLimited((429, {"Retry-After": "86400"})) as server:
        assert _comments(server) == []
    assert sleeps == [rest.RETRY_AFTER_CAP]


@pytest.mark.parametrize("garbage", ["nan", "-1", "inf", "tomorrow"])
def test_a_garbage_retry_after_backs_off_instead(sleeps, garbage):
    with _RateLimited((429, {"Retry-After": garbage})) as server:
        assert _comments(server) == []
    assert len(sleeps) == 1 and math.isfinite(sleeps[0]) and sleeps[0] == 0.25


@pytest.mark.parametrize(
    ("answer", "attempts"), [((429, {"Retry-After": "1"}), 3), ((403, {"retry-after": "1"}), 2)]
)
def test_rate_limited_to_the_end_is_one_line_naming_it(sleeps, answer, attempts):
    """A 429, or a 403 that is GitHub's rate limit, on every attempt: one line, no traceback."""
    with _RateLimited(*[answer] * 5) as server, pytest.raises(InfraError) as info:
        _comments(server, attempts=attempts)
    assert server.seen == attempts and sleeps == [1.0] * (attempts - 1)
    line = info.value.one_line()
    assert f"HTTP {answer[0]}" in line and "rate limited" in line


def test_a_403_that_is_githubs_rate_limit_is_waited_by_its_headers(sleeps):
    """GitHub signals a spent limit with 403 as well as 429: remaining 0 waits until the
    reset, a secondary limit's retry-after is waited; a plain 403 stays a refusal."""
    reset = str(int(time.time()) + 30)
    answers = [
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}),
        (403, {"retry-after": "3"}),
    ]
    with _RateLimited(*answers) as server:
        assert _comments(server) == []
    assert server.seen == 3 and sleeps[1] == 3.0 and 25 <= sleeps[0] <= 30


def test_a_plain_403_is_not_retried():
    with (
        _RateLimited((403, {"x-ratelimit-remaining": "4999"})) as server,
        pytest.raises(rest.Forbidden),
    ):
        _comments(server)
    assert server.seen == 1


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels"),
        (b"[" + b"{}," * (6 << 20) + b"{}]", "more than 16 MiB"),
        (b'[{"id": NaN, "body": "x"}]', "NaN"),
    ],
    ids=["deep", "huge", "nan"],
)
def test_a_hostile_body_is_one_line(body, why):
    """Before: 100,000 brackets ended in a RecursionError's traceback, and 18 MiB was read
    whole and parsed into 6 million objects."""
    with _RateLimited((200, {}, body)) as server, pytest.raises(InfraError) as info:
        _comments(server)
    line = info.value.one_line()
    assert why in line and "\n" not in line and server.seen == 1


@pytest.mark.parametrize("reset", ["²", "¹²³"])
def test_a_rate_limit_reset_in_other_digits_waits_the_cap_not_an_internal_error(sleeps, reset):
    """``x-ratelimit-reset`` is the server's text: before, ``str.isdigit()`` passed ``²`` and
    ``int()`` then raised ValueError out of the client (an internal error, exit 3)."""
    limited = (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset})
    with _RateLimited(limited) as server:
        assert _comments(server) == []
    assert server.seen == 2 and sleeps == [rest.RETRY_AFTER_CAP]


def test_a_header_value_that_is_not_ascii_is_kept_as_sent():
    """A server's header in Latin-1 (``X-Served-By: café``): before, the answer, read whole,
    was rebuilt from decoded header text that httpx refused to encode as ASCII again, and
    every request to that server ended in UnicodeEncodeError (an internal error)."""
    with _RateLimited((200, {"X-Served-By": "café"}, b"[]")) as server:
        assert _comments(server) == []
    assert server.seen == 1


@pytest.mark.parametrize("url", ["http://[::1", "http://h\n/api", "http://h/\x00"])
def test_an_api_url_that_is_no_url_is_one_line_naming_its_variable(url):
    """Before: httpx.InvalidURL out of the client's constructor, an internal error (and in
    gpu-smoke's quarantine, after its verdict, the verdict lost with it)."""
    from gpuci.errors import InputError
    from gpuci.forges._gitlab import GitLab

    with pytest.raises(InputError) as info:
        GitHub(url, "tok-123", "o/r")
    assert "GITHUB_API_URL=" in info.value.one_line() and "\n" not in info.value.one_line()
    with pytest.raises(InputError, match="CI_API_V4_URL="):
        GitLab(url, "tok-123", "42")


def test_a_request_path_httpx_cannot_send_is_one_line():
    """A path made from an input holding a control character: before, httpx.InvalidURL out of
    the client (an internal error of the training report's comment, say)."""
    from gpuci.errors import InputError

    with (
        FakeGitHub() as server,
        GitHub(server.github_api, server.state.github_token, "o/r\x1b") as gh,
        pytest.raises(InputError) as info,
    ):
        list(gh.ours(1, "<!-- m -->"))
    line = info.value.one_line()
    assert "cannot make a GitHub API request of GET" in line and "\x1b" not in line
