"""The sticky report comment against a hostile GitHub API (the fake GitHub, told to lie).

The token goes to the API's own origin only (the thief, another fake on its own port, must
see no request); a comment is updated only when the token's own account wrote it; an answer
of the wrong shape is one line and exit 3, never a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forges.fake_github import BOT_ID, FakeGitHub
from gpuci_testing import run_cli, run_cli_here

REPO = "acme/models"
PR = 7
MARKER = "<!-- gpuci-report:training -->"
LIST = f"/api/v3/repos/{REPO}/issues/{PR}/comments"


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def thief():
    with FakeGitHub() as other:
        yield other


def report_env(tmp_path: Path, fake: FakeGitHub, **extra: str) -> dict[str, str]:
    return fake.pull_request_env(tmp_path, REPO, PR, **extra)


def report(env: dict[str, str], process: bool = False):
    """``gpuci report --comment``: in this process, or (``process``) in a fresh interpreter."""
    args = ("report", "--comment", "--gpu-minutes", "1")
    return run_cli(*args, env=env) if process else run_cli_here(*args, env=env)


def planted_marker(fake: FakeGitHub) -> dict[str, Any]:
    """mallory pastes the hidden marker into her own comment, before ours exists."""
    return fake.state.comment(REPO, PR, f"{MARKER}\nmallory's words", user="mallory")


def comments(fake: FakeGitHub) -> list[dict]:
    return fake.state.comments[f"{REPO}#{PR}"]


def test_a_next_page_on_another_origin_is_not_followed(tmp_path, github, thief):
    """Nor is the token in any line the runner shows, the interpreter's exit included: this
    run has a process of its own."""
    github.state.comment(REPO, PR, "an ordinary first comment")
    github.state.next_link = f"{thief.base}{LIST}?per_page=100&page=2"
    proc = report(report_env(tmp_path, github), process=True)
    assert thief.state.requests == [], "the token went to another origin"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not followed" in proc.stdout and thief.base in proc.stdout  # a warning says why
    shown = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "::add-mask::" not in ln]
    assert not [ln for ln in shown if github.state.github_token in ln]


def test_a_next_page_whose_host_is_no_idna_name_is_another_origin(tmp_path, github):
    """``Link: <http://xn--/...>; rel="next"``: httpx accepts the URL but its host decodes to
    no name (idna raised from ``origin()``: an internal error, review B, 4); it is now what
    any other origin is, not followed, with the usual warning."""
    github.state.comment(REPO, PR, "an ordinary first comment")
    github.state.next_link = f"http://xn--{LIST}?per_page=100&page=2"
    proc = report(report_env(tmp_path, github))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "to another origin (http://xn--" in proc.stdout and "not followed" in proc.stdout


def test_a_next_page_on_another_port_or_scheme_of_the_same_host_is_not_followed(
    tmp_path, github, thief
):
    github.state.comment(REPO, PR, "first")
    for link in (f"https://127.0.0.1:{github.port}{LIST}?page=2", f"{thief.base}{LIST}?page=2"):
        github.state.next_link = link
        proc = report(report_env(tmp_path, github))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert thief.state.requests == []


def test_a_redirect_is_not_followed_with_the_token(tmp_path, github, thief):
    github.state.answers[("GET", LIST)] = (302, {}, {"Location": f"{thief.base}{LIST}"})
    proc = report(report_env(tmp_path, github))
    assert thief.state.requests == []
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "redirect" in proc.stdout and "internal error" not in proc.stdout


def test_a_marker_in_another_users_comment_is_never_updated(tmp_path, github):
    theirs = planted_marker(github)
    proc = report(report_env(tmp_path, github))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert theirs["body"] == f"{MARKER}\nmallory's words"  # untouched
    ours = [c for c in comments(github) if c["user"]["login"] == "bot"]
    assert len(ours) == 1 and MARKER in ours[0]["body"]
    # the second run updates our own comment, still not hers
    proc = report(report_env(tmp_path, github))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(comments(github)) == 2 and theirs["body"].endswith("mallory's words")
    assert [m for m, *_ in github.state.requests].count("PATCH") == 1


def test_an_installation_token_finds_its_bot_account_through_graphql(tmp_path, github):
    """GITHUB_TOKEN may not read /user; GraphQL's viewer names its bot, so ours is updated."""
    github.state.me = "github-actions[bot]"
    planted_marker(github)
    env = report_env(tmp_path, github, GITHUB_TOKEN=github.state.job_token)
    assert report(env).returncode == 0
    proc = report(env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mine = [c for c in comments(github) if c["user"]["login"] == "github-actions[bot]"]
    assert len(mine) == 1 and len(comments(github)) == 2
    assert ("POST", "/api/graphql", {"query": "query { viewer { login databaseId } }"}) in (
        github.state.requests
    )


def test_an_unknown_identity_creates_rather_than_updates(tmp_path, github):
    github.state.graphql_viewer = False
    planted_marker(github)
    proc = report(report_env(tmp_path, github, GITHUB_TOKEN=github.state.job_token))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PATCH" not in [m for m, *_ in github.state.requests]
    assert "could not learn which account" in proc.stdout


@pytest.mark.parametrize(
    ("method", "answer", "said"),
    [
        ("GET", {"message": "an object"}, "a JSON object where a list of comments belongs"),
        ("GET", "a string", "a JSON string where a list of comments belongs"),
        ("GET", [1, 2], "a list holding something other than comments"),
        (
            "GET",
            [{"body": MARKER, "id": "x", "user": {"login": "bot", "id": BOT_ID}}],
            "a comment without a numeric id",
        ),
        ("POST", [], "a JSON array where the created comment belongs"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_one_line_exit_3(tmp_path, github, method, answer, said):
    github.state.answers[(method, LIST)] = (200 if method == "GET" else 201, answer, {})
    proc = report(report_env(tmp_path, github))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout and "Traceback" not in proc.stderr
    assert "GitHub API" in proc.stdout and said in proc.stdout


def _comment_pages_read(fake: FakeGitHub) -> int:
    return sum(1 for m, path, _ in fake.state.requests if m == "GET" and path.startswith(LIST))


def test_others_marked_comments_are_judged_as_read_and_only_our_ids_kept(github):
    """Anyone can paste the marker: a comment of someone else's is dropped as its page is
    read, ours is kept as its id only (a review saw 50 pages of 16 MiB bodies held: 811 MiB)."""
    from gpuci.forges._github import GitHub

    for _ in range(3):
        planted_marker(github)
    github.state.comment(REPO, PR, f"quoting `{MARKER}` further down", user="bot")
    ours = github.state.comment(REPO, PR, f"{MARKER}\nthe report", user="bot")
    with GitHub(github.github_api, github.state.github_token, REPO) as gh:
        assert list(gh.ours(PR, MARKER)) == [{"id": ours["id"]}]


def test_the_search_for_our_comment_stops_at_it(github):
    """The sticky comment is among the oldest: no page after the one that holds it is read."""
    from gpuci.forges._github import GitHub

    ours = github.state.comment(REPO, PR, f"{MARKER}\nthe report", user="bot")
    for _ in range(9):  # five more pages of two, each comment pasting the marker
        planted_marker(github)
    with GitHub(github.github_api, github.state.github_token, REPO) as gh:
        assert gh.upsert(PR, MARKER, f"{MARKER}\nnew")[0] == "updated"
    assert ours["body"] == f"{MARKER}\nnew"
    assert _comment_pages_read(github) == 1
