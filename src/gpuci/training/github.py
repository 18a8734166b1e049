"""The few GitHub calls a sticky comment needs, over httpx.

Why httpx and not PyGithub: httpx is already a dependency, the job is a handful of endpoints
(list issue comments with ``Link`` pagination, create, update, and who the token is), and a
plain client takes ``GITHUB_API_URL`` as its base so GitHub Enterprise Server works unchanged.
Transient failures (5xx, 429, network) are retried by one tenacity policy; everything else
becomes one-line error with its fix.

The API is a server we talk to, not one we trust: the token goes to the API's own origin only
(a ``Link: rel="next"`` elsewhere is not followed), a comment is updated only when the token's
own identity wrote it (a marker is text anyone can paste), and an answer of the wrong shape is
an infrastructure error, not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from gpuci.errors import GpuciError, InfraError, InputError
from gpuci.redact import excerpt, json_kind, redact_url

API_VERSION = "2022-11-28"
MAX_PAGES = 50  # 5,000 comments: far past any real pull request


class Forbidden(GpuciError):
    """The token may not comment here (a fork's read-only token): reported, then skipped."""


class _Transient(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, _Transient | httpx.TransportError)


class GitHub:
    def __init__(
        self,
        api_url: str,
        token: str,
        repository: str,
        *,
        timeout: float = 20.0,
        attempts: int = 3,
        max_wait: float = 4.0,
    ) -> None:
        self.repository = repository
        self._token = token
        self._client = httpx.Client(
            base_url=api_url.rstrip("/"),
            timeout=timeout,
            follow_redirects=False,  # a redirect would carry the token wherever it points
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "gpu-ci",
            },
        )
        self._retry = Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.25, max=max_wait),
            retry=retry_if_exception(_is_transient),
            reraise=True,
        )
        self._identity: Identity | bool | None = False  # False: not asked yet
        self.warnings: list[str] = []  # said once each, for the caller's result

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        """The API's base URL, fit to print."""
        return redact_url(str(self._client.base_url))

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _once(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = self._client.request(method, url, **kwargs)
        if response.status_code >= 500 or response.status_code == 429:
            raise _Transient(response)
        self._check(response, method, url)
        return response

    def _retried(self, fn: Any, method: str, url: str) -> Any:
        """Run ``fn`` under the retry policy; map what is left to one-line errors."""
        try:
            return self._retry(fn)
        except _Transient as exc:
            raise InfraError(
                f"GitHub API answered HTTP {exc.response.status_code} to {method} "
                f"{redact_url(url)}",
                hint="GitHub may be degraded; rerun the job later",
            ) from None
        except httpx.HTTPError as exc:
            raise InfraError(
                f"cannot reach the GitHub API at {self.where}: {type(exc).__name__}",
                hint="check GITHUB_API_URL and the runner's network",
            ) from None

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """An idempotent call (GET, PATCH): safe to repeat as it is."""
        return self._retried(lambda: self._once(method, url, **kwargs), method, url)

    def _check(self, response: httpx.Response, method: str, url: str) -> None:
        code = response.status_code
        if code < 300:
            return
        try:
            found = response.json()
            message = found.get("message", "") if isinstance(found, dict) else ""
        except ValueError:
            message = ""
        # redact (the token, URL credentials) BEFORE cutting: half a key matches no redaction
        detail = excerpt(str(message), 200, secrets=[self._token])
        where = f"{method} {redact_url(url)}: HTTP {code}" + (f" ({detail})" if detail else "")
        if code < 400:
            raise InfraError(
                f"GitHub API answered a redirect: {where}",
                hint="set GITHUB_API_URL to the API's final address (redirects are not followed)",
            )
        if code == 401:
            raise InputError(
                f"GitHub rejected the token: {where}",
                hint="pass a valid token (github.token works) via the token input or GITHUB_TOKEN",
            )
        if code == 403:
            raise Forbidden(
                f"the token may not comment: {where}",
                hint="grant 'pull-requests: write'; fork PRs get a read-only token",
            )
        if code == 404:
            raise InputError(
                f"not found: {where}",
                hint="check the repository and pull request number (and GITHUB_API_URL)",
            )
        raise InputError(f"GitHub refused the request: {where}", hint="check the inputs")

    def _json(self, response: httpx.Response, what: str, kind: type) -> Any:
        """The answer's JSON, which must be a ``kind`` (list or dict): else one clear line."""
        try:
            found = response.json()
        except ValueError:
            found = None
        if not isinstance(found, kind):
            shape = "no JSON" if found is None else f"a JSON {json_kind(found)}"
            raise InfraError(
                f"GitHub API at {self.where} answered {shape} where {what} belongs "
                f"({response.request.method} {redact_url(str(response.request.url))})",
                hint="check GITHUB_API_URL points at the GitHub REST API",
            )
        return found

    # ----- following pages, on the API's own origin only ------------------------------------
    def _next_page(self, response: httpx.Response) -> str | None:
        """The ``Link: rel="next"`` URL when it stays on the API's origin, else None."""
        link = response.links.get("next", {}).get("url")
        if not link:
            return None
        try:
            target = response.url.join(link)
        except (httpx.InvalidURL, ValueError):
            target = None
        if target is None or _origin(target) != _origin(self._client.base_url):
            self._warn(
                f"GitHub API at {self.where} linked the next page of comments to another "
                f"origin ({redact_url(link)}); not followed, so the token is not sent there"
            )
            return None
        return str(target)

    def marked_comments(self, number: int, marker: str) -> list[dict[str, Any]]:
        """Every comment on the issue/PR whose body holds ``marker``, following pages."""
        url: str | None = f"/repos/{self.repository}/issues/{number}/comments"
        params: dict[str, Any] | None = {"per_page": 100}
        found: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            if url is None:
                break
            response = self._send("GET", url, params=params)
            page = self._json(response, "a list of comments", list)
            if not all(isinstance(comment, dict) for comment in page):
                raise InfraError(
                    f"GitHub API at {self.where} answered a list holding something other than "
                    "comments",
                    hint="check GITHUB_API_URL points at the GitHub REST API",
                )
            found += [c for c in page if marker in str(c.get("body") or "")]
            url, params = self._next_page(response), None  # the next link carries its query
        return found

    def find_comment(
        self, number: int, marker: str, author: Identity | None = None
    ) -> dict[str, Any] | None:
        """The first comment holding ``marker`` (and written by ``author`` when given)."""
        marked = self.marked_comments(number, marker)
        return next((c for c in marked if author is None or author.wrote(c)), None)

    # ----- who the token is -----------------------------------------------------------------
    def identity(self) -> Identity | None:
        """The token's own account: ``GET /user``, else GraphQL ``viewer`` (app tokens).

        An installation token (``GITHUB_TOKEN``, a GitHub App's) may not read ``/user``; its
        bot account (``github-actions[bot]``, ``<app>[bot]``) is what GraphQL's ``viewer``
        names. None when neither answers: the caller then never updates, only creates.
        """
        if self._identity is not False:
            return self._identity  # type: ignore[return-value]
        found = self._ask_rest() or self._ask_graphql()
        if found is None:
            self._warn(
                "could not learn which account the token belongs to; posting a new comment "
                "rather than updating one that may be someone else's"
            )
        self._identity = found
        return found

    def _ask_rest(self) -> Identity | None:
        try:
            response = self._send("GET", "/user")
        except (Forbidden, InputError):  # 403 for installation tokens, 404 on some servers
            return None
        return Identity.from_json(self._json(response, "the token's user", dict))

    def _ask_graphql(self) -> Identity | None:
        base = str(self._client.base_url).rstrip("/")
        url = base[: -len("/v3")] + "/graphql" if base.endswith("/api/v3") else base + "/graphql"
        query = {"query": "query { viewer { login databaseId } }"}
        try:
            response = self._send("POST", url, json=query)
        except (Forbidden, InputError):
            return None
        data = self._json(response, "a GraphQL answer", dict).get("data")
        viewer = data.get("viewer") if isinstance(data, dict) else None
        if not isinstance(viewer, dict):
            return None
        return Identity.from_json({"login": viewer.get("login"), "id": viewer.get("databaseId")})

    # ----- writing ------------------------------------------------------------------------
    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        url = f"/repos/{self.repository}/issues/comments/{comment_id}"
        return self._json(self._send("PATCH", url, json={"body": body}), "a comment", dict)

    def upsert(self, number: int, marker: str, body: str) -> tuple[str, dict[str, Any]]:
        """Update our marked comment in place, or create it: ``("updated"|"created", comment)``.

        Only a comment the token's own account wrote is updated: the marker is plain text, so
        anyone can paste it into a comment of theirs. A POST is not idempotent: when its answer
        is lost (5xx, dropped connection) the comment may exist all the same. So a retry starts
        over from the search, and a comment that the lost POST did create is updated instead of
        posted twice.
        """
        url = f"/repos/{self.repository}/issues/{number}/comments"

        def attempt() -> tuple[str, dict[str, Any]]:
            marked = self.marked_comments(number, marker)
            existing = None
            if marked:  # someone's comment holds the marker: is one of them ours?
                me = self.identity()
                existing = next((c for c in marked if me is not None and me.wrote(c)), None)
            if existing is not None:
                return "updated", self.update_comment(_comment_id(existing), body)
            response = self._once("POST", url, json={"body": body})
            return "created", self._json(response, "the created comment", dict)

        return self._retried(attempt, "POST", url)


@dataclass(frozen=True)
class Identity:
    """An account on GitHub: compared by numeric id when both sides have one, else login."""

    login: str
    id: int | None = None

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> Identity | None:
        login, uid = found.get("login"), found.get("id")
        if not isinstance(login, str) or not login:
            return None
        return cls(login, uid if isinstance(uid, int) and not isinstance(uid, bool) else None)

    def wrote(self, comment: dict[str, Any]) -> bool:
        user = comment.get("user")
        if not isinstance(user, dict):
            return False
        uid = user.get("id")
        if self.id is not None and isinstance(uid, int) and not isinstance(uid, bool):
            return uid == self.id
        login = user.get("login")
        return isinstance(login, str) and login.lower() == self.login.lower()


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and effective port: what a token may be sent to."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host.lower(), url.port or default


def _comment_id(comment: dict[str, Any]) -> int:
    cid = comment.get("id")
    if isinstance(cid, bool) or not isinstance(cid, int):
        raise InfraError(
            f"GitHub API answered a comment without a numeric id ({excerpt(repr(cid), 40)})",
            hint="check GITHUB_API_URL points at the GitHub REST API",
        )
    return cid
