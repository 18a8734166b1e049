"""The three GitHub REST calls a sticky comment needs, over httpx.

Why httpx and not PyGithub: httpx is already a dependency, the job is three endpoints (list issue
comments with ``Link`` pagination, create, update), and a plain client takes ``GITHUB_API_URL``
as its base so GitHub Enterprise Server works unchanged. Transient failures (5xx, 429, network)
are retried by one tenacity policy; everything else becomes one-line error with its fix.
"""

from __future__ import annotations

from typing import Any

import httpx
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from gpuci.errors import GpuciError, InfraError, InputError

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
        self._client = httpx.Client(
            base_url=api_url.rstrip("/"),
            timeout=timeout,
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

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
                f"GitHub API answered HTTP {exc.response.status_code} to {method} {url}",
                hint="GitHub may be degraded; rerun the job later",
            ) from None
        except httpx.HTTPError as exc:
            raise InfraError(
                f"cannot reach the GitHub API at {self._client.base_url}: {type(exc).__name__}",
                hint="check GITHUB_API_URL and the runner's network",
            ) from None

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """An idempotent call (GET, PATCH): safe to repeat as it is."""
        return self._retried(lambda: self._once(method, url, **kwargs), method, url)

    @staticmethod
    def _check(response: httpx.Response, method: str, url: str) -> None:
        code = response.status_code
        if code < 400:
            return
        try:
            detail = str(response.json().get("message", ""))[:200]
        except ValueError:
            detail = ""
        where = f"{method} {url}: HTTP {code}" + (f" ({detail})" if detail else "")
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

    def find_comment(self, number: int, marker: str) -> dict[str, Any] | None:
        """The first comment on the issue/PR whose body holds ``marker``, following pages."""
        url: str | None = f"/repos/{self.repository}/issues/{number}/comments"
        params: dict[str, Any] | None = {"per_page": 100}
        for _ in range(MAX_PAGES):
            if url is None:
                break
            response = self._send("GET", url, params=params)
            for comment in response.json():
                if marker in (comment.get("body") or ""):
                    return comment
            next_link = response.links.get("next", {}).get("url")
            url, params = next_link, None  # the next link carries its own query
        return None

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        url = f"/repos/{self.repository}/issues/comments/{comment_id}"
        return self._send("PATCH", url, json={"body": body}).json()

    def upsert(self, number: int, marker: str, body: str) -> tuple[str, dict[str, Any]]:
        """Update the marked comment in place, or create it: ``("updated"|"created", comment)``.

        A POST is not idempotent: when its answer is lost (5xx, dropped connection) the comment
        may exist all the same. So a retry starts over from the search, and a comment that the
        lost POST did create is updated instead of posted twice.
        """
        url = f"/repos/{self.repository}/issues/{number}/comments"

        def attempt() -> tuple[str, dict[str, Any]]:
            existing = self.find_comment(number, marker)
            if existing is not None:
                return "updated", self.update_comment(int(existing["id"]), body)
            return "created", self._once("POST", url, json={"body": body}).json()

        return self._retried(attempt, "POST", url)
