"""The dry run plans a job's gpu-ci steps as its runner will run them: on a GitHub-hosted
label the runner sets ``RUNNER_ENVIRONMENT=github-hosted`` and the runner-local tier is off
there, so the plan must say so too (it planned ``on: auto`` from this machine before)."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import WORKFLOWS, plan_steps, write
from gpuci.dryrun._contexts import runner_environment
from gpuci.dryrun._expressions import Unknown


@pytest.mark.parametrize(
    ("runs_on", "policy"),
    [
        ("ubuntu-latest", "off: GitHub-hosted runner"),
        ("[ubuntu-24.04-arm]", "off: GitHub-hosted runner"),
        ("[self-hosted, gpu]", "on: auto"),
        ("gpu-box", "on: auto"),  # a custom label: as this machine is
    ],
)
def test_a_jobs_labels_decide_the_tier_its_plan_shows(tmp_path, runs_on, policy):
    wf = write(
        tmp_path,
        f"""\
        on: push
        jobs:
          j:
            runs-on: {runs_on}
            steps:
              - uses: acme/gpu-ci/actions/cache-weights@v1
                with:
                  key: k
                  path: models
                  store: {(tmp_path / "store").as_uri()}
        """,
        f"{WORKFLOWS}/w.yml",
    )
    (step,) = plan_steps(tmp_path, wf, cwd=tmp_path, RUNNER_ENVIRONMENT="self-hosted")
    (result,) = step["plans"]
    assert result["report"]["local_cache_policy"].startswith(policy), result


@pytest.mark.parametrize(
    ("runs_on", "expected"),
    [
        ("ubuntu-22.04", "github-hosted"),
        (["macos-15-xlarge"], "github-hosted"),
        (["windows-latest"], "github-hosted"),
        (["self-hosted", "linux", "x64"], "self-hosted"),
        ("ubuntu-gpu", None),  # a self-hosted runner's own label
        (["ubuntu-latest", "gpu"], None),  # no GitHub image has the second label
        ({"group": "large"}, None),
        ("", None),
    ],
)
def test_which_labels_are_githubs_own_images(runs_on, expected):
    got = runner_environment(runs_on)
    assert (None if isinstance(got, Unknown) else got) == expected
