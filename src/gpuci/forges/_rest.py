"""A small REST client for the code forges' APIs (GitHub, GitLab): the report, the runners.

What both need, written once: one retry policy (:mod:`gpuci.retry`) for transient failures
(5xx, 429 with its ``Retry-After``, network), HTTP errors mapped to one-line errors with their
fix, answers read within a size cap and parsed as untrusted JSON (:mod:`gpuci.untrusted_json`:
depth, numbers, then the shape asked for), and pagination by ``Link: rel="next"`` followed only
on the API's own origin (the token goes nowhere else; redirects are not followed). Each service
subclasses it with its headers and hints.

Every request ends by a deadline (:func:`gpuci.httpclients.deadline`, the one mechanism
retry-fetch uses too): its connect, headers, interim ``1xx`` answers and body, each read and
write, end by three timeouts; a whole listing, every page and retry, by LISTING_TIMEOUTS. A
per-read timeout alone never ends a server that sends ``103 Early Hints`` forever, or trickles
its headers a byte at a time, and the CI job would hang on the report comment or a runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from gpuci import httpclients, untrusted_json
from gpuci.errors import GpuciError, InfraError, InputError
from gpuci.httpclients import Deadline, origin
from gpuci.redact import excerpt, json_kind, redact_url
from gpuci.retry import RetryPolicy, parse_retry_after

MAX_PAGES = 50  # 5,000 comments or notes: far past any real pull or merge request
# One answer's body: a page of 100 comments of GitHub's 65,536 characters each fits; a server
# that sends more is refused before anything is parsed (the bytes past it are never read).
MAX_BODY = untrusted_json.MAX_BYTES
# One request, whole (connect, headers, 1xx answers, body), ends by this many timeouts.
REQUEST_TIMEOUTS = 3
# A whole listing, every page and its retries, ends by this many: 200 s at the default 20 s
# timeout (GitHub answers a page in about a second), not MAX_PAGES requests of 60 s each.
LISTING_TIMEOUTS = 10


_Client = TypeVar("_Client", bound="ApiClient")


class Forbidden(GpuciError):
    """The token may not comment here (a read-only token): reported, then skipped."""


class Gone(InputError):
    """404: what was asked for is not there (a runner deleted, a label removed meanwhile)."""


# A forge that asks for more than a minute (GitHub's secondary rate limit) is better answered
# by failing the step than by holding the runner.
RETRY_AFTER_CAP = 60.0


class _Transient(Exception):
    def __init__(self, response: httpx.Response, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.retry_after = (
            retry_after
            if retry_after is not None
            else parse_retry_after(response.headers.get("Retry-After"), cap=RETRY_AFTER_CAP)
        )


def rate_limit_wait(response: httpx.Response, now: float | None = None) -> float | None:
    """A 403 that is GitHub's rate limit, not a refusal: the seconds to wait (at most
    RETRY_AFTER_CAP), else None.

    GitHub answers a spent primary limit with 403 (or 429) and ``x-ratelimit-remaining: 0``,
    waiting until ``x-ratelimit-reset`` (epoch seconds); a secondary limit with
    ``retry-after``. A 403 with neither is a permission problem.
    """
    if response.status_code != 403:
        return None
    headers = response.headers
    wish = parse_retry_after(headers.get("retry-after"), cap=RETRY_AFTER_CAP)
    if wish is not None:
        return wish
    if headers.get("x-ratelimit-remaining", "").strip() != "0":
        return None
    reset = headers.get("x-ratelimit-reset", "").strip()
    # ASCII digits only: isdigit() passes "²", which int() refuses (an internal error)
    if not (reset.isascii() and reset.isdigit()) or len(reset) > 12:
        return RETRY_AFTER_CAP
    at = time.time() if now is None else now
    return min(max(0.0, int(reset) - at), RETRY_AFTER_CAP)


class ApiClient:
    """Retries, error mapping, shape checks and origin-only pagination for one REST API."""

    service = "the"  # "GitHub", "GitLab": names the API in every message
    url_env = "the API URL"  # the variable that sets the base URL, for hints
    hint_401 = "pass a valid token"
    hint_403 = "grant the token write access"
    hint_404 = "check the project and request number"
    forbidden_what = "the token may not comment"  # what a 403 means for this client

    def __init__(
        self,
        api_url: str,
        token: str,
        headers: dict[str, str],
        *,
        timeout: float = 20.0,
        attempts: int = 3,
        max_wait: float = 4.0,
    ) -> None:
        self._token = token
        # No redirect is followed (the factory's rule): one would carry the token elsewhere.
        try:
            self._client = httpclients.new_client(
                timeout=timeout,
                agent="forges",
                base_url=api_url.rstrip("/"),
                headers=headers,
            )
        except httpx.InvalidURL as exc:  # the variable's text: else an internal error
            raise InputError(
                f"{self.url_env}={excerpt(redact_url(api_url), 80)!r} is no URL ({exc})",
                hint=f"set {self.url_env} to the {self.service} REST API's address",
            ) from None
        self._policy = RetryPolicy(
            attempts=attempts,
            initial=0.25,
            max_wait=max_wait,
            jitter="none",
            retry_after_cap=RETRY_AFTER_CAP,
        )
        self.warnings: list[str] = []  # said once each, for the caller's result
        self._timeout = timeout

    def close(self) -> None:
        self._client.close()

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        """The API's base URL, fit to print."""
        return redact_url(str(self._client.base_url))

    @property
    def _api_hint(self) -> str:
        return f"check {self.url_env} points at the {self.service} REST API"

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _once(
        self, method: str, url: str, within: Deadline | None = None, **kwargs: Any
    ) -> httpx.Response:
        response = self._bounded(self._client.build_request(method, url, **kwargs), within)
        if response.status_code >= 500 or response.status_code == 429:
            raise _Transient(response)
        limited = rate_limit_wait(response)
        if limited is not None:  # a rate limit dressed as 403: wait by its headers
            raise _Transient(response, limited)
        self._check(response, method, url)
        return response

    def _deadline(self, within: Deadline | None) -> Deadline:
        """One request's deadline, REQUEST_TIMEOUTS from now; ``within``'s when it ends first
        (the listing the request pages through)."""
        own = Deadline.after(REQUEST_TIMEOUTS * self._timeout)
        return within if within is not None and within.at < own.at else own

    def _bounded(self, request: httpx.Request, within: Deadline | None = None) -> httpx.Response:
        """Send ``request`` and read its body, at most MAX_BODY bytes (decoded), all of it by
        its deadline; over the cap is one line (InfraError), past the deadline a timeout."""
        try:
            return httpclients.read_bounded(self._client, request, self._deadline(within), MAX_BODY)
        except untrusted_json.Unusable:
            raise InfraError(
                f"{self.service} API at {self.where} answered more than "
                f"{MAX_BODY >> 20} MiB to {request.method} {redact_url(str(request.url))}",
                hint=self._api_hint,
            ) from None

    def _retried(self, fn: Callable[[], Any], method: str, url: str, *, repeat: bool = True) -> Any:
        """Run ``fn`` under the retry policy (once when ``repeat`` is False: a POST that lost
        its answer may have done its work); map what is left to one-line errors."""
        try:
            return self._policy.retrying((_Transient, httpx.TransportError))(fn) if repeat else fn()
        except _Transient as exc:
            limited = exc.response.status_code in (403, 429)
            raise InfraError(
                f"{self.service} API answered HTTP {exc.response.status_code} to {method} "
                f"{redact_url(url)}" + (" (rate limited)" if limited else ""),
                hint=f"the {self.service} rate limit is spent; rerun the job once it resets"
                if limited
                else f"{self.service} may be degraded; rerun the job later",
            ) from None
        except httpx.InvalidURL as exc:  # a path built from an input (a repository, a project)
            raise InputError(
                f"cannot make a {self.service} API request of {method} "
                f"{excerpt(redact_url(url), 120)!r}: {excerpt(str(exc), 80)}",
                hint="check the inputs that name it (repository, project, number)",
            ) from None
        except httpx.HTTPError as exc:
            # a timeout says which: a read's, or the request's or listing's deadline
            why = f" ({excerpt(str(exc), 80)})" if isinstance(exc, httpx.TimeoutException) else ""
            raise InfraError(
                f"cannot reach the {self.service} API at {self.where}: {type(exc).__name__}{why}",
                hint=f"check {self.url_env} and the runner's network",
            ) from None

    def _send(
        self, method: str, url: str, within: Deadline | None = None, **kwargs: Any
    ) -> httpx.Response:
        """An idempotent call (GET, PATCH, PUT): safe to repeat as it is; each attempt ends
        by its own deadline, or ``within``'s when that is sooner."""
        return self._retried(lambda: self._once(method, url, within, **kwargs), method, url)

    def _send_unless_gone(self, method: str, url: str) -> httpx.Response | None:
        """:meth:`_send`; None when the API answers 404 (deleted already, or never there)."""
        try:
            return self._send(method, url)
        except Gone:
            return None

    def _send_once(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A call that must not be repeated blindly (a POST that creates something)."""
        return self._retried(lambda: self._once(method, url, **kwargs), method, url, repeat=False)

    def _check(self, response: httpx.Response, method: str, url: str) -> None:
        code = response.status_code
        if code < 300:
            return
        try:
            found = untrusted_json.loads(response.content)
            message = (
                found.get("message", "") or found.get("error", "")
                if isinstance(found, dict)
                else ""
            )
        except untrusted_json.Unusable:
            message = ""
        # redact (the token, URL credentials) BEFORE cutting: half a key matches no redaction
        detail = excerpt(str(message), 200, secrets=[self._token])
        where = f"{method} {redact_url(url)}: HTTP {code}" + (f" ({detail})" if detail else "")
        if code < 400:
            raise InfraError(
                f"{self.service} API answered a redirect: {where}",
                hint=f"set {self.url_env} to the API's final address (redirects are not followed)",
            )
        if code == 401:
            raise InputError(f"{self.service} rejected the token: {where}", hint=self.hint_401)
        if code == 403:
            raise Forbidden(f"{self.forbidden_what}: {where}", hint=self.hint_403)
        if code == 404:
            raise Gone(f"not found: {where}", hint=self.hint_404)
        raise InputError(f"{self.service} refused the request: {where}", hint="check the inputs")

    def _json(self, response: httpx.Response, what: str, kind: type) -> Any:
        """The answer's JSON, which must be a ``kind`` (list or dict): else one clear line."""
        why = ""
        try:
            found = untrusted_json.loads(response.content, finite=True)
        except untrusted_json.Unusable as exc:
            found, why = None, f" ({exc})"
        if not isinstance(found, kind):
            shape = f"no usable JSON{why}" if found is None else f"a JSON {json_kind(found)}"
            raise InfraError(
                f"{self.service} API at {self.where} answered {shape} where {what} belongs "
                f"({response.request.method} {redact_url(str(response.request.url))})",
                hint=self._api_hint,
            )
        return found

    # ----- following pages, on the API's own origin only ------------------------------------
    def _next_page(self, response: httpx.Response, what: str) -> str | None:
        """The ``Link: rel="next"`` URL when it stays on the API's origin, else None."""
        link = response.links.get("next", {}).get("url")
        if not link:
            return None
        try:
            target = response.url.join(link)
        except (httpx.InvalidURL, ValueError):
            target = None
        if target is None or origin(target) != origin(self._client.base_url):
            self._warn(
                f"{self.service} API at {self.where} linked the next page of {what} to another "
                f"origin ({redact_url(link)}); not followed, so the token is not sent there"
            )
            return None
        return str(target)

    def pages(
        self,
        url: str,
        what: str,
        key: str = "",
        *,
        whole: bool = False,
        query: dict[str, str] | None = None,
    ) -> Iterator[list[dict[str, Any]]]:
        """Each page of a list of objects, following ``Link`` on the API's origin only.

        ``key`` names the list inside an object page (GitHub's ``{"runners": [...]}``).
        ``whole``: the caller acts on what is missing from the list (a runner not listed is
        gone), so a list longer than MAX_PAGES is an error rather than a silent cut.
        ``query``: more parameters of the first page (the next pages' links carry them).
        """
        next_url: str | None = url
        params: dict[str, Any] | None = {"per_page": 100, **(query or {})}
        listing = Deadline.after(LISTING_TIMEOUTS * self._timeout)  # every page, retries too
        for _ in range(MAX_PAGES):
            if next_url is None:
                return
            response = self._send("GET", next_url, listing, params=params)
            if key:
                page = self._json(response, f"an object listing {what}", dict).get(key)
                if not isinstance(page, list):
                    raise InfraError(
                        f"{self.service} API at {self.where} answered no list '{key}' of {what}",
                        hint=self._api_hint,
                    )
            else:
                page = self._json(response, f"a list of {what}", list)
            if not all(isinstance(item, dict) for item in page):
                raise InfraError(
                    f"{self.service} API at {self.where} answered a list holding something "
                    f"other than {what}",
                    hint=self._api_hint,
                )
            yield page
            next_url, params = self._next_page(response, what), None  # next carries its query
        if whole and next_url is not None:
            raise InfraError(
                f"{self.service} API at {self.where} lists more than {MAX_PAGES} pages of {what}",
                hint="too many to judge what is missing; clean up by hand, then rerun",
            )

    def sticky(
        self,
        create_url: str,
        body: str,
        ours: Callable[[], Iterator[dict[str, Any]]],
        update: Callable[[int], dict[str, Any]],
    ) -> tuple[str, dict[str, Any]]:
        """Update our marked comment in place, or create it: ``("updated"|"created", item)``.

        ``ours()`` yields our marked comments oldest first; the first is updated (by its id)
        and no page past it is read. A POST is not idempotent: when its answer is lost (5xx,
        dropped connection) the comment may exist all the same. So a retry starts over from
        the search, and a comment that the lost POST did create is updated instead of posted
        twice.
        """

        def attempt() -> tuple[str, dict[str, Any]]:
            existing = next(ours(), None)
            if existing is not None:
                return "updated", update(self.item_id(existing))
            response = self._once("POST", create_url, json={"body": body})
            return "created", self._json(response, "the created comment", dict)

        return self._retried(attempt, "POST", create_url)

    def item_id(self, item: dict[str, Any]) -> int:
        cid = item.get("id")
        if isinstance(cid, bool) or not isinstance(cid, int):
            raise InfraError(
                f"{self.service} API answered a comment without a numeric id "
                f"({excerpt(repr(cid), 40)})",
                hint=self._api_hint,
            )
        return cid
