"""The few GitLab calls a sticky merge-request note needs, over the shared REST client.

GitLab's counterpart of ``github.py``: list a merge request's notes (``Link`` pagination, on the
API's own origin only), create, update, and who the token is (``GET /user``). The base URL is
``CI_API_V4_URL`` as given, so self-managed GitLab (also under a path) works unchanged. The
token is a project access token with ``api`` scope (``PRIVATE-TOKEN``): the CI job token may
read but never write notes. A note is updated only when the token's own user wrote it (the
marker is text anyone can paste), and system notes are never candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from gpuci import settings
from gpuci.errors import InputError
from gpuci.forges._rest import ApiClient, Forbidden

__all__ = ["Forbidden", "GitLab", "GitLabApi"]

TOKEN_ENV = settings.GITLAB_TOKEN.name  # declared in gpuci.settings; named here for hints


class GitLabApi(ApiClient):
    """A GitLab REST client, the token sent as ``PRIVATE-TOKEN``: the base of every GitLab
    client (notes, runners), each naming what a 401, 403 and 404 mean for it in its hints."""

    service = "GitLab"
    url_env = settings.CI_API_V4_URL.name

    def __init__(self, api_url: str, token: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, {"PRIVATE-TOKEN": token}, **kwargs)


class GitLab(GitLabApi):
    hint_401 = f"set {TOKEN_ENV} to a valid project access token with the api scope"
    hint_403 = (
        f"give the token in {TOKEN_ENV} the api scope and at least the Reporter role "
        "(CI_JOB_TOKEN cannot write notes)"
    )
    hint_404 = "check CI_PROJECT_ID, the merge request IID and CI_API_V4_URL"

    def __init__(self, api_url: str, token: str, project: str, **kwargs: Any) -> None:
        super().__init__(api_url, token, **kwargs)
        self.project = quote(str(project), safe="")  # an id, or group/name URL-encoded
        self._me: int | bool | None = False  # False: not asked yet

    def _notes_url(self, iid: int) -> str:
        return f"/projects/{self.project}/merge_requests/{iid}/notes"

    def ours(self, iid: int, marker: str) -> Iterator[dict[str, Any]]:
        """Each user note the token's own user wrote whose body starts with ``marker`` (the
        report writes it first; one quoted further down is not this note's), as
        ``{"id": ...}``, oldest first, page by page as the caller asks: GitLab lists the newest
        first unless asked, and the sticky note is among the oldest, so it is on the first
        page read however long the thread grows.

        Anyone can paste the marker, so notes are judged by author as each page is read and
        only an id is kept; the user is asked at the first marked note, and unknown, nothing
        can be ours and the search ends.
        """
        oldest_first = {"sort": "asc", "order_by": "created_at"}
        for page in self.pages(self._notes_url(iid), "notes", query=oldest_first):
            for note in page:
                if note.get("system") is True:
                    continue
                if not str(note.get("body") or "").lstrip().startswith(marker):
                    continue
                me = self.identity()
                if me is None:
                    return
                if _author_id(note) == me:
                    yield {"id": note.get("id")}

    def identity(self) -> int | None:
        """The token's own user id (``GET /user``; a project token's bot user), else None."""
        if self._me is not False:
            return self._me
        found: int | None = None
        try:
            user = self._json(self._send("GET", "/user"), "the token's user", dict)
            uid = user.get("id")
            found = uid if isinstance(uid, int) and not isinstance(uid, bool) else None
        except (Forbidden, InputError):
            found = None
        if found is None:
            self._warn(
                "could not learn which user the token belongs to; posting a new note rather "
                "than updating one that may be someone else's"
            )
        self._me = found
        return found

    def update_note(self, iid: int, note_id: int, body: str) -> dict[str, Any]:
        url = f"{self._notes_url(iid)}/{note_id}"
        return self._json(self._send("PUT", url, json={"body": body}), "a note", dict)

    def upsert(self, iid: int, marker: str, body: str) -> tuple[str, dict[str, Any]]:
        """Update our marked note in place, or create it: ``("updated"|"created", note)``."""
        return self.sticky(
            self._notes_url(iid),
            body,
            lambda: self.ours(iid, marker),
            lambda note_id: self.update_note(iid, note_id, body),
        )


def _author_id(note: dict[str, Any]) -> int | None:
    author = note.get("author")
    uid = author.get("id") if isinstance(author, dict) else None
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None
