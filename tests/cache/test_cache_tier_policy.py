"""Where the runner-local tier is on by default (``auto``): off on runners thrown away after the
job, on elsewhere, the input and ``GPUCI_LOCAL_CACHE`` always winning, and the restore saying
which and why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cache_testing import CREDS, cache_cmd
from cache_testing import store_flags as _flags
from treeutil import write_tree

from gpuci.cache._stores.tier_policy import choose, ephemeral_runner

GITHUB_HOSTED = {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "github-hosted"}
MANAGERS = ".runners-manager.gitlab.com"
GITLAB_COM = {"GITLAB_CI": "true", "CI_SERVER_HOST": "gitlab.com"}


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "HOME": str(tmp_path / "home"),
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        **CREDS,
        **extra,
    }


# ----- detection, one rule at a time ----------------------------------------------------------
def test_github_hosted_runners_are_thrown_away():
    assert ephemeral_runner(GITHUB_HOSTED) == "GitHub-hosted runner"
    assert ephemeral_runner({**GITHUB_HOSTED, "RUNNER_ENVIRONMENT": "self-hosted"}) is None


@pytest.mark.parametrize(
    "runner",
    [
        {"CI_RUNNER_DESCRIPTION": f"green-4.saas-linux-small-amd64{MANAGERS}/default"},
        {"CI_RUNNER_DESCRIPTION": "3-blue.shared.runners-manager.gitlab.com/default"},
        {"CI_RUNNER_TAGS": '["saas-linux-medium-amd64"]'},
        {"CI_RUNNER_TAGS": "gitlab-org, saas-macos-medium-m1"},
    ],
)
def test_gitlab_com_hosted_runners_are_thrown_away(runner):
    assert ephemeral_runner({**GITLAB_COM, **runner}) == "GitLab.com hosted runner"


@pytest.mark.parametrize(
    "environ",
    [
        # a project's own runner on gitlab.com
        {**GITLAB_COM, "CI_RUNNER_DESCRIPTION": "gpu-box-1", "CI_RUNNER_TAGS": '["gpu", "a100"]'},
        # a self-managed GitLab whose runners happen to be named like GitLab's
        {
            "GITLAB_CI": "true",
            "CI_SERVER_HOST": "gitlab.example.com",
            "CI_RUNNER_TAGS": '["saas-linux-small-amd64"]',
        },
        {},  # a laptop
    ],
)
def test_other_runners_keep_their_disk(environ):
    assert ephemeral_runner(environ) is None
    assert choose(environ).on


def test_a_gpuci_runner_pod_that_terminates_after_its_job_is_thrown_away():
    pod = {"GPUCI_RUNNER_PLATFORM": "github", "GPUCI_SELF_STOP_ACTION": "terminate"}
    assert ephemeral_runner(pod) == "gpu-ci runner pod on RunPod"
    assert ephemeral_runner({**pod, "GPUCI_SELF_STOP_ACTION": "stop"}) is None


# ----- what wins, and the reason printed -------------------------------------------------------
def test_auto_is_off_on_a_github_hosted_runner_and_says_why():
    choice = choose(GITHUB_HOSTED)
    assert not choice.on and choice.root is None
    assert choice.text.startswith("off: GitHub-hosted runner, thrown away after the job")


def test_the_input_and_the_variable_beat_auto(tmp_path):
    mine = tmp_path / "tier"
    assert choose(GITHUB_HOSTED, str(mine)).root == Path(os.path.realpath(mine))
    assert choose(GITHUB_HOSTED, "on").on
    assert choose({**GITHUB_HOSTED, "GPUCI_LOCAL_CACHE": "on"}).on
    assert choose({**GITHUB_HOSTED, "GPUCI_LOCAL_CACHE": str(mine)}).on
    # the input beats the variable, both ways
    assert not choose({"GPUCI_LOCAL_CACHE": str(mine)}, "off").on
    assert choose({**GITHUB_HOSTED, "GPUCI_LOCAL_CACHE": "off"}, "on").on
    off = choose({"GPUCI_LOCAL_CACHE": "off"})
    assert off.text == "off: GPUCI_LOCAL_CACHE is off"
    assert choose({}, "auto").on and choose(GITHUB_HOSTED, "AUTO").on is False


# ----- the restore and save say it ------------------------------------------------------------
def test_a_restore_on_a_github_hosted_runner_fills_no_tier_and_says_so(tmp_path):
    tree = write_tree(tmp_path / "tree", {"w.bin": os.urandom(10_000)})
    store = (tmp_path / "store").as_uri()
    env = _env(tmp_path, **GITHUB_HOSTED, RUNNER_TOOL_CACHE=str(tmp_path / "tool"))
    saved, log = cache_cmd("save", _flags(store, "k", tree), env)
    assert saved.ok, log
    assert saved.report["local_cache_policy"].startswith("off: GitHub-hosted runner")
    out = tmp_path / "out"
    got, log = cache_cmd("restore", _flags(store, "k", out), env)
    assert got.ok and got.outputs["cache-hit"] is True, log
    assert not (tmp_path / "tool").exists()  # no tier made, filled or even created
    assert got.report["local_cache"] is None
    assert got.report["local_cache_policy"] == (
        "off: GitHub-hosted runner, thrown away after the job (local-cache: on keeps one anyway)"
    )
    assert any(
        "Runner-local cache (`local-cache`): off: GitHub-hosted runner" in block
        for block in got.summary
    )
    json.dumps(got.report)  # the report stays plain JSON


def test_a_restore_on_a_self_hosted_runner_fills_the_tier_and_says_so(tmp_path):
    tree = write_tree(tmp_path / "tree", {"w.bin": os.urandom(10_000)})
    store = (tmp_path / "store").as_uri()
    env = _env(tmp_path, GITHUB_ACTIONS="true", RUNNER_ENVIRONMENT="self-hosted")
    assert cache_cmd("save", _flags(store, "k", tree), {**env, "GPUCI_LOCAL_CACHE": "off"})[0].ok
    got, log = cache_cmd("restore", _flags(store, "k", tmp_path / "out"), env)
    assert got.ok, log
    tier = tmp_path / "home" / ".cache" / "gpuci" / "local"
    assert got.report["local_cache"] == os.path.realpath(tier)
    assert got.report["local_cache_policy"].startswith("on: auto")
    assert list((tier / "runs").rglob("*")), "the cold restore filled the tier"


def test_a_miss_and_a_dry_run_say_it_too(tmp_path):
    store = (tmp_path / "store").as_uri()
    env = _env(tmp_path, **GITLAB_COM, CI_RUNNER_TAGS='["saas-linux-small-amd64"]')
    missed, log = cache_cmd("restore", _flags(store, "nothing", tmp_path / "o"), env, dry_run=True)
    assert missed.ok, log
    assert missed.report["local_cache_policy"].startswith("off: GitLab.com hosted runner")
    assert any("off: GitLab.com hosted runner" in block for block in missed.summary)
