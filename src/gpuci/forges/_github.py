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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuci import settings
from gpuci.errors import InputError
from gpuci.forges._rest import ApiClient, Forbidden

__all__ = ["Forbidden", "GitHub", "Identity"]

API_VERSION = "2022-11-28"


def api_headers(token: str) -> dict[str, str]:
    """What every GitHub REST call sends: the bearer token (when there is one: public reads go
    without), GitHub's JSON type, the API version."""
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


class GitHubReader(ApiClient):
    """A GitHub REST client with GitHub's headers, a token only when one is given: as is, for
    reads that need no repository of their own (commits of a ref, actions/runner releases);
    the base of every GitHub client (comments, runners), each naming what a 401, 403 and 404
    mean for it in its hints."""

    service = "GitHub"
    url_env = settings.GITHUB_API_URL.name

    def __init__(self, api_url: str, token: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, api_headers(token), **kwargs)


class GitHub(GitHubReader):
    hint_401 = "pass a valid token (github.token works) via the token input or GITHUB_TOKEN"
    hint_403 = "grant 'pull-requests: write'; fork PRs get a read-only token"
    hint_404 = "check the repository and pull request number (and GITHUB_API_URL)"

    def __init__(self, api_url: str, token: str, repository: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, **kwargs)
        self.repository = repository
        self._identity: Identity | bool | None = False  # False: not asked yet

    def ours(self, number: int, marker: str) -> Iterator[dict[str, Any]]:
        """Each comment the token's own account wrote whose body starts with ``marker``, as
        ``{"id": ...}``, oldest first, page by page as the caller asks.

        The report writes its marker first; one quoted further down (a metric named after
        another report's marker, in a code span) must not make this comment that report's.
        Anyone can paste the marker, so comments are judged by author as each page is read
        and only an id is kept: 50 pages of others' 16 MiB comments are never held. Who the
        token is is asked at the first marked comment (none marked: never); unknown, nothing
        can be ours and the search ends.
        """
        url = f"/repos/{self.repository}/issues/{number}/comments"
        for page in self.pages(url, "comments"):
            for comment in page:
                if not str(comment.get("body") or "").lstrip().startswith(marker):
                    continue
                me = self.identity()
                if me is None:
                    return
                if me.wrote(comment):
                    yield {"id": comment.get("id")}

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
        anyone can paste it into a comment of theirs.
        """
        return self.sticky(
            f"/repos/{self.repository}/issues/{number}/comments",
            body,
            lambda: self.ours(number, marker),
            lambda comment_id: self.update_comment(comment_id, body),
        )


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
