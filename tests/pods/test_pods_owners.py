"""Owners come from the CI identity; budgets from a file in the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuci.pods._budgets import policy as budgets
from gpuci.pods._runpod.naming import tag_of

UP = dict(image="img", command="serve", ttl="45m", gpu_types="NVIDIA L40S")  # $0.86/h
GITHUB = {"GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "org/repo"}


def _budgets(tmp_path: Path, text: str) -> str:
    path = tmp_path / "budgets.yml"
    path.write_text(text)
    return str(path)


def test_an_owner_other_than_the_ci_identity_is_refused(fake, run):
    res = run("up", **UP, owner="alice", extra_env={**GITHUB, "GITHUB_ACTOR": "mallory"})
    assert res.code == 2, res.stdout
    assert "differs from the CI identity 'mallory'" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []  # refused before anything was created
    dry = run("up", dry_run=True, **UP, owner="alice", extra_env={**GITHUB, "GITHUB_ACTOR": "m"})
    assert dry.code == 2  # the dry run refuses alike


def test_the_triggering_actor_wins_over_the_actor(fake, run):
    ident = {**GITHUB, "GITHUB_ACTOR": "bot", "GITHUB_TRIGGERING_ACTOR": "alice"}
    res = run("up", **UP, extra_env=ident)
    assert res.code == 0, res.stdout
    assert tag_of(fake.view(fake.pods[res.outputs["pod-id"]])).owner == "alice"
    assert run("up", **UP, owner="bot", extra_env=ident).code == 2  # re-run by alice


def test_gitlab_identity_and_a_delegation(fake, run, tmp_path):
    lab = {"CI_PIPELINE_URL": "https://gl/p/1", "GITLAB_USER_LOGIN": "bob"}
    assert run("up", **UP, owner="team-ml", extra_env=lab).code == 2
    file = _budgets(tmp_path, "delegations:\n  bob: [team-ml]\nowners:\n  team-ml: 10\n")
    res = run("up", **UP, owner="team-ml", budgets=file, extra_env=lab)
    assert res.code == 0, res.stdout
    assert tag_of(fake.view(fake.pods[res.outputs["pod-id"]])).owner == "team-ml"
    assert run("up", **UP, owner="carol", budgets=file, extra_env=lab).code == 2


def test_budget_usd_can_only_lower_the_files_budget(fake, run, tmp_path):
    file = _budgets(tmp_path, "period: 7d\ndefault: 5\nowners:\n  alice: 0.5\n")
    ident = {**GITHUB, "GITHUB_ACTOR": "alice"}
    raised = run("up", **UP, budgets=file, budget_usd="100", extra_env=ident)
    assert raised.code == 1 and "would pass budget $0.50" in raised.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []
    bob = {**GITHUB, "GITHUB_ACTOR": "bob"}
    lowered = run("up", **UP, budgets=file, budget_usd="0.2", extra_env=bob)
    assert lowered.code == 1 and "would pass budget $0.20" in lowered.json["headline"]
    ok = run("up", **UP, budgets=file, extra_env=bob)  # the default 5 applies
    assert ok.code == 0, ok.stdout
    billing = fake.calls("GET", "/v2/billing/pods")[-1]
    span = billing.query["endTime"][0], billing.query["startTime"][0]
    assert span[0] > span[1]  # the file's 7-day period is what was read
    plan = run("up", dry_run=True, **UP, budgets=file, extra_env=bob).json["report"]["plan"]
    assert plan["budget"]["period_s"] == 7 * 86400 and plan["budget"]["budget_usd"] == 5


@pytest.mark.parametrize(
    "text, words",
    [
        ("owners: [alice]\n", "must be mappings"),
        ("owners:\n  alice: lots\n", "owners.alice must be a non-negative number"),
        ("period: soon\n", "is not a duration"),
        ("budget: 3\n", "unknown key(s) budget"),
        ("owners: {alice: 1\n", "not valid YAML"),
        # the one bounded YAML reader: PyYAML alone kept the last, a budget of 100
        ("owners: {alice: 1, alice: 100}\n", "names the key 'alice' twice"),
        ("owners: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than"),
        ("owners:\n  alice: 1\n" + "x" * (300 << 10) + "\n", "is over 256 KiB"),
    ],
)
def test_a_bad_budgets_file_is_bad_input(fake, run, tmp_path, text, words):
    res = run("up", **UP, budgets=_budgets(tmp_path, text))
    assert res.code == 2 and words in res.json["headline"], res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []


def test_a_named_budgets_file_that_is_missing_is_bad_input(run, tmp_path):
    res = run("up", **UP, budgets=str(tmp_path / "nope.yml"))
    assert res.code == 2 and "does not exist" in res.json["headline"]


def test_laptop_identity_is_git_user_then_user(tmp_path):
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\temail = jane.doe@example.com\n")
    import os

    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": str(cfg), "USER": "root"}
    ident = budgets.ci_identity(env)
    assert (ident.login, ident.from_ci) == ("jane.doe", False)
    env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    assert budgets.ci_identity(env).login == "root"
