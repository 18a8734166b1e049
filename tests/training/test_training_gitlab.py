"""The sticky merge-request note against a fake GitLab API v4 on 127.0.0.1: one note, updated."""

from __future__ import annotations

from pathlib import Path

import pytest
from training_cli import MARKER, answer, run_gate

from forges.fake_gitlab import BOT_ID, FakeGitLab
from gpuci_testing import clean_env

PROJECT = "9"


@pytest.fixture
def gitlab():
    with FakeGitLab() as fake:
        yield fake


def mr_env(fake: FakeGitLab, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A merge-request pipeline of project 9 (acme/models), MR !3, whose API is ``fake``."""
    env = fake.gitlab_env(
        GITLAB_CI="true",
        CI_PROJECT_ID=PROJECT,
        CI_PROJECT_PATH="acme/models",
        CI_PROJECT_URL=fake.base + "/gitlab/acme/models",
        CI_MERGE_REQUEST_IID="3",
        CI_COMMIT_SHA="c" * 40,
        CI_JOB_URL=fake.base + "/gitlab/acme/models/-/jobs/42",
        CI_JOB_TOKEN=fake.state.ci_job_token,
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
    )
    return clean_env(**{**env, **extra})


def report(tmp_path: Path, env: dict[str, str], accuracy: float, process: bool = False) -> dict:
    """The gate with a sticky note; neither token in its output (with ``process``: in all a
    process prints, its exit included)."""
    flags = ("--min", "accuracy=0.9", "--comment", "true", "--json")
    proc = run_gate(tmp_path, {"accuracy": accuracy}, *flags, env=env, process=process)
    for secret in (env.get("GPUCI_GITLAB_TOKEN"), env.get("CI_JOB_TOKEN")):
        assert not secret or secret not in proc.stdout + proc.stderr  # masked, never printed
    return answer(proc)


def test_note_created_then_updated_in_place_across_pages(tmp_path, gitlab):
    for n in range(3):  # two pages of others' notes, one pasting our marker
        gitlab.state.note(PROJECT, 3, f"note {n}" + (f" {MARKER}" if n == 1 else ""))
    env = mr_env(gitlab, tmp_path)
    first = report(tmp_path, env, 0.95, process=True)
    assert first["rc"] == 0, first
    assert first["outputs"]["comment"] == "created"
    notes = gitlab.state.notes[f"{PROJECT}!3"]
    ours = [n for n in notes if n["author"]["id"] == BOT_ID]
    assert len(ours) == 1 and MARKER in ours[0]["body"]
    assert "Model gate passed" in ours[0]["body"]
    assert first["outputs"]["comment-url"] == (
        f"{gitlab.base}/gitlab/acme/models/-/merge_requests/3#note_{ours[0]['id']}"
    )

    second = report(tmp_path, env, 0.5)
    assert second["outputs"]["comment"] == "updated"
    ours = [n for n in gitlab.state.notes[f"{PROJECT}!3"] if n["author"]["id"] == BOT_ID]
    assert len(ours) == 1 and "Model gate failed" in ours[0]["body"]
    assert notes[1]["body"] == f"note 1 {MARKER}"  # someone else's marked note: never edited
    paths = [p for _, p, _ in gitlab.state.requests]
    assert any("page=2" in p for p in paths)  # the second page was read
    assert ("GET", "/gitlab/api/v4/user", None) in gitlab.state.requests
    assert any(m == "PUT" for m, *_ in gitlab.state.requests)


def test_only_the_job_token_says_it_cannot_write_notes(tmp_path, gitlab):
    env = mr_env(gitlab, tmp_path)
    del env["GPUCI_GITLAB_TOKEN"]
    got = report(tmp_path, env, 0.95)
    assert got["rc"] == 0 and got["outputs"]["comment"] == "skipped"
    notes = [a["message"] for a in got["annotations"]]
    assert any("CI_JOB_TOKEN cannot write merge request notes" in n for n in notes), notes
    assert any("GPUCI_GITLAB_TOKEN" in n and "api" in n for n in notes)
    assert gitlab.state.requests == []  # nothing was tried with the job token


def test_a_token_gitlab_refuses_with_403_is_a_warning(tmp_path, gitlab):
    env = mr_env(gitlab, tmp_path, GPUCI_GITLAB_TOKEN=gitlab.state.ci_job_token)
    got = report(tmp_path, env, 0.95)
    assert got["rc"] == 0 and got["outputs"]["comment"] == "skipped"
    assert any("403" in a["message"] for a in got["annotations"])
    assert f"{PROJECT}!3" not in gitlab.state.notes


def test_a_next_page_on_another_origin_is_not_followed(tmp_path, gitlab):
    with FakeGitLab(gitlab_token=gitlab.state.gitlab_token) as thief:
        gitlab.state.note(PROJECT, 3, "hello")
        gitlab.state.next_link = f"{thief.gitlab_api}/projects/9/merge_requests/3/notes?page=2"
        got = report(tmp_path, mr_env(gitlab, tmp_path), 0.95)
        assert got["rc"] == 0, got
        assert thief.state.requests == []  # the token never went there
        assert any("another origin" in a["message"] for a in got["annotations"])


def test_our_note_is_found_first_though_gitlab_lists_the_newest_first(gitlab, monkeypatch):
    """GitLab lists notes newest first: the sticky note, the oldest, would be on the last
    page. The client asks for the oldest first, so even one page finds it (before: a second
    note was created once it fell past the pages read)."""
    from gpuci.forges import _rest as rest
    from gpuci.forges._gitlab import GitLab

    monkeypatch.setattr(rest, "MAX_PAGES", 1)
    with GitLab(gitlab.gitlab_api, gitlab.state.gitlab_token, "9") as client:
        assert client.upsert(3, MARKER, f"{MARKER} first")[0] == "created"
        for n in range(4):
            gitlab.state.note("9", 3, f"a newer note {n}")
        assert client.upsert(3, MARKER, f"{MARKER} second")[0] == "updated"
    ours = [n for n in gitlab.state.notes["9!3"] if n["author"]["id"] == BOT_ID]
    assert [n["body"] for n in ours] == [f"{MARKER} second"]


def test_a_note_quoting_the_marker_further_down_is_not_the_sticky_note(gitlab):
    from gpuci.forges._gitlab import GitLab

    gitlab.state.note(PROJECT, 3, f"### other report\n\n`{MARKER}`", author_id=BOT_ID)
    ours = gitlab.state.note(PROJECT, 3, f"{MARKER}\n\n### report", author_id=BOT_ID)
    with GitLab(gitlab.gitlab_api, gitlab.state.gitlab_token, PROJECT) as client:
        found = list(client.ours(3, MARKER))
    assert [n["id"] for n in found] == [ours["id"]]


def test_others_marked_notes_are_dropped_as_read_and_the_search_stops_at_ours(gitlab):
    """A note of another user's that pastes the marker is not kept (only our ids are), and
    the search for the sticky note reads no page after the one holding it."""
    from gpuci.forges._gitlab import GitLab

    gitlab.state.note(PROJECT, 3, f"{MARKER} pasted by someone else")
    ours = gitlab.state.note(PROJECT, 3, f"{MARKER}\n\n### report", author_id=BOT_ID)
    for n in range(6):  # three more pages of two
        gitlab.state.note(PROJECT, 3, f"{MARKER} pasted again {n}")
    with GitLab(gitlab.gitlab_api, gitlab.state.gitlab_token, PROJECT) as client:
        assert list(client.ours(3, MARKER)) == [{"id": ours["id"]}]
        gitlab.state.requests.clear()
        assert client.upsert(3, MARKER, f"{MARKER} second")[0] == "updated"
    listed = [path for method, path, _ in gitlab.state.requests if method == "GET"]
    assert len([p for p in listed if "/notes" in p]) == 1, listed
