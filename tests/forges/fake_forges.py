"""The fake GitHub and the fake GitLab on one port, sharing one list of runners: for tests that
run one scenario on either platform (``api.github_env()`` or ``api.gitlab_env()``)."""

from __future__ import annotations

from dataclasses import dataclass

from forges.fake_github import FakeGitHub, GitHubRoutes, GitHubState
from forges.fake_gitlab import FakeGitLab, GitLabRoutes, GitLabState


@dataclass
class ForgesState(GitHubState, GitLabState):
    pass


class _Routes(GitHubRoutes, GitLabRoutes):
    state: ForgesState


class FakeForges(FakeGitHub, FakeGitLab):
    handler = _Routes
    state_class = ForgesState
    state: ForgesState

    def secrets(self) -> list[str]:
        return FakeGitHub.secrets(self) + FakeGitLab.secrets(self)
