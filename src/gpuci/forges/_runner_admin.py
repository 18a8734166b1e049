"""Take a self-hosted runner out of the pool and give it back: GitHub labels, GitLab pause.

GitHub routes a job by labels, so a runner whose GPU labels are gone gets no GPU job; the
runner stays registered (and visible, labelled ``gpuci-quarantined``) so someone can look at
it. GitHub's REST API: ``GET {repos/o/r|orgs/o}/actions/runners`` (paginated), ``DELETE
.../actions/runners/{id}/labels/{name}`` (custom labels only: the read-only ones the runner
reports itself, ``self-hosted``, ``Linux``, ``X64``..., are refused) and ``POST
.../actions/runners/{id}/labels`` with ``{"labels": [...]}``. GitLab pauses a runner with
``PUT /runners/:id`` ``paused=true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gpuci import settings
from gpuci.errors import GpuciError, InfraError, InputError
from gpuci.forges import _github as gh
from gpuci.forges._gitlab import GitLabApi
from gpuci.forges._rest import ApiClient, Gone

_GITHUB_TOKEN = settings.RUNNER_TOKEN.name
_GITLAB_TOKEN = settings.GITLAB_TOKEN.name


class Ambiguous(InputError):
    """Two runners share the name and nothing says which one this is."""


@dataclass(frozen=True)
class Identity:
    """A runner's exact identity, from its own ``.runner`` file: its id and where it lives."""

    runner_id: int
    base: str  # "/repos/o/r", "/orgs/o" or "/enterprises/e"


@dataclass(frozen=True)
class Runner:
    """A self-hosted runner as GitHub lists it."""

    runner_id: int
    name: str
    labels: tuple[str, ...]
    base: str  # "/repos/o/r", "/orgs/o" or "/enterprises/e": where its label endpoints are
    status: str = ""  # "online", "offline", as listed


def github_runners(client: ApiClient, base: str) -> Iterator[Runner]:
    """Every self-hosted runner GitHub lists under ``base`` (``/repos/o/r``, ``/orgs/o``,
    ``/enterprises/e``), page by page: the one listing both quarantine and ``pods`` read. The
    list is a server's answer: an entry without a numeric id or a string name is no runner."""
    for page in client.pages(f"{base}/actions/runners", "runners", key="runners", whole=True):
        for item in page:
            rid, name = item.get("id"), item.get("name")
            if isinstance(rid, int) and not isinstance(rid, bool) and isinstance(name, str):
                labels = _label_names(item.get("labels"))
                yield Runner(rid, name, labels, base, str(item.get("status") or ""))


class GitHubRunnerLabels(gh.GitHubReader):
    """Find a runner by its exact name, remove and add its custom labels."""

    hint_401 = f"set {_GITHUB_TOKEN} to a valid token with administration rights"
    hint_403 = (
        f"give the token in {_GITHUB_TOKEN} 'Administration: read and write' on the "
        "repository ('Self-hosted runners: read and write' on the organisation for org runners, "
        "a classic token with manage_runners:enterprise for enterprise runners)"
    )
    hint_404 = "check GITHUB_REPOSITORY, GITHUB_API_URL and that the token can see the runner"
    forbidden_what = "the token may not manage self-hosted runners"

    def find(self, name: str, base: str) -> Runner | None:
        """The runner called exactly ``name`` under ``base``; None when there is none."""
        # exact: gpu-1 is not gpu-10
        return next((r for r in github_runners(self, base) if r.name == name), None)

    def by_id(self, runner_id: int, base: str) -> Runner | None:
        """The runner with id ``runner_id`` under ``base``; None when there is none."""
        response = self._send_unless_gone("GET", f"{base}/actions/runners/{int(runner_id)}")
        if response is None:
            return None
        item = self._json(response, "a runner", dict)
        name = item.get("name")
        if item.get("id") != runner_id or not isinstance(name, str):
            raise InfraError(
                "GitHub answered another runner than the one asked for", hint=self._api_hint
            )
        return Runner(runner_id, name, _label_names(item.get("labels")), base)

    def locate(
        self,
        name: str,
        repository: str,
        identity: Identity | None = None,
        enterprise: str = "",
    ) -> Runner | None:
        """This runner by its exact identity: the id and scope from its own ``.runner`` file
        when known and that runner has this name; else by name in the repository's list, its
        organisation's and, when ``enterprise`` (a slug) is given, the enterprise's, refusing
        (:class:`Ambiguous`) when more than one of them holds a runner of that name."""
        refused: GpuciError | None = None  # the file's lookup, said if the name finds none
        if identity is not None:
            try:
                found = self.by_id(identity.runner_id, identity.base)
            except GpuciError as exc:  # a scope the token may not read: the file names it
                found, refused = None, exc
            if found is not None and found.name == name:
                return found
            # The file names another runner, or none: the runner's root is a folder every job
            # on it can write, so the name (the runner's own RUNNER_NAME) decides, as without
            # a file; a bad runner must not stay in service because a job planted a file.
        owner = repository.partition("/")[0]
        scopes = [(f"/repos/{repository}", repository)]
        scopes.append((f"/orgs/{quote(owner, safe='')}", f"the organisation {owner}"))
        if enterprise:
            scopes.append(
                (f"/enterprises/{quote(enterprise, safe='')}", f"the enterprise {enterprise}")
            )
        held = []
        for base, what in scopes:
            try:
                runner = self.find(name, base)
            except Gone:  # a user account, not an organisation
                if base.startswith("/repos/"):
                    raise
                runner = None
            if runner is not None:
                held.append((runner, what))
        if len(held) > 1:
            which = ", ".join(f"one of {what} (id {r.runner_id})" for r, what in held)
            raise Ambiguous(
                f"{len(held)} self-hosted runners are named {name!r}: {which}; the name alone "
                "cannot say which runs this job",
                hint="run it on the runner itself (its .runner file names its id), or rename one",
            )
        if not held and refused is not None:
            raise refused  # the runner's own scope refused us: "no such runner" would be false
        return held[0][0] if held else None

    def remove_label(self, runner: Runner, label: str) -> bool:
        """Remove one custom label; False when it is not there (a retried DELETE whose first
        answer was lost, or a label someone removed meanwhile)."""
        url = f"{runner.base}/actions/runners/{runner.runner_id}/labels/{quote(label, safe='')}"
        return self._send_unless_gone("DELETE", url) is not None

    def add_labels(self, runner: Runner, labels: list[str]) -> tuple[str, ...]:
        """Add custom labels; the runner's labels as GitHub answers them."""
        url = f"{runner.base}/actions/runners/{runner.runner_id}/labels"
        found = self._json(self._send("POST", url, json={"labels": labels}), "labels", dict)
        return _label_names(found.get("labels"))


def _label_names(labels: Any) -> tuple[str, ...]:
    if not isinstance(labels, list):
        return ()
    return tuple(
        str(lb["name"]) for lb in labels if isinstance(lb, dict) and isinstance(lb.get("name"), str)
    )


class GitLabRunnerPause(GitLabApi):
    """``PUT /runners/:id`` with ``paused``: a paused runner picks up no job."""

    hint_401 = f"set {_GITLAB_TOKEN} to a valid token that can manage the runner"
    hint_403 = (
        f"give the token in {_GITLAB_TOKEN} the api scope and the role GitLab asks to manage "
        "this runner: Maintainer on its project (project runner), Owner of its group (group "
        "runner), administrator (instance runner)"
    )
    hint_404 = "check CI_RUNNER_ID and CI_API_V4_URL"
    forbidden_what = "the token may not manage this runner"

    def set_paused(self, runner_id: int, paused: bool) -> dict[str, Any]:
        """Pause or unpause the runner; its details as GitLab answers them.

        GitLab answers the runner after the update: only an answer that says ``paused`` is
        now as asked (``active`` the opposite, where an older GitLab lists only that) counts.
        GitLab refuses ``active`` and ``paused`` together, so only ``paused`` is sent.

        Raises:
            InfraError: the answer says the runner is not, or may not be, as asked (an old
                GitLab that ignored ``paused``, a proxy's 2xx).
        """
        url = f"/runners/{int(runner_id)}"
        found = self._json(self._send("PUT", url, json={"paused": paused}), "a runner", dict)
        now = found.get("paused")
        if not isinstance(now, bool) and isinstance(found.get("active"), bool):
            now = not found["active"]
        if now is not paused:
            said = f"paused: {str(now).lower()}" if isinstance(now, bool) else "no paused or active"
            want = "paused" if paused else "unpaused"
            raise InfraError(
                f"GitLab answered PUT {url} with {said}: runner {int(runner_id)} was not {want}",
                hint="GitLab 14.8 or later pauses with paused=true; else pause or resume it "
                "in Settings > CI/CD > Runners",
            )
        return found
