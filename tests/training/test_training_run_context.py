"""Where a run is, read from the CI's variables: what a PR's code can rewrite is not trusted
over what it cannot (the runner's ``GITHUB_REF``), and a number is ASCII digits or nothing."""

from __future__ import annotations

import json

from gpuci.training import _ci as ci


def test_the_runners_pull_ref_wins_over_a_rewritten_event_file(tmp_path):
    """PR 7's training step rewrites the event file to name PR 8: the report still goes to
    PR 7, which the runner's GITHUB_REF names (no step can change it)."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 8}}))
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REF": "refs/pull/7/merge",
    }
    assert ci._github_pr(env) == 7
    assert ci.detect({**env, "GITHUB_SHA": "a" * 40}).pull_request == 7


def test_the_event_file_names_the_pr_when_the_ref_is_a_branch(tmp_path):
    """pull_request_target and issue_comment run on the default branch: only the event
    names the pull request there."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"issue": {"number": 9, "pull_request": {"url": "u"}}}))
    env = {"GITHUB_EVENT_PATH": str(event), "GITHUB_REF": "refs/heads/main"}
    assert ci._github_pr(env) == 9


def test_a_merge_request_iid_is_ascii_digits_or_none():
    """``"²".isdigit()`` is true and int() refuses it; ``"٣"`` is a digit int() reads as 3:
    neither is a merge request GitLab wrote, and neither may end the job in a traceback."""
    for iid in ("\u00b2", "\u0663", "9" * 5000, "-3"):
        env = {"GITLAB_CI": "true", "CI_MERGE_REQUEST_IID": iid}
        assert ci.detect(env).pull_request is None, iid
    assert ci.detect({"GITLAB_CI": "true", "CI_MERGE_REQUEST_IID": "3"}).pull_request == 3


def test_a_pull_ref_is_ascii_digits_or_no_pull_request(tmp_path):
    for number in ("\u0663", "\u00b2", "9" * 5000):
        env = {"GITHUB_EVENT_PATH": str(tmp_path / "none.json")}
        assert ci._github_pr({**env, "GITHUB_REF": f"refs/pull/{number}/merge"}) is None
