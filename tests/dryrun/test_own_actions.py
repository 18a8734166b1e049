"""A checkout's own action (``uses: ./``, ``./actions/<name>``) and another repository's
``actions/<name>`` are not gpu-ci's for sharing a name with it (review E, finding 9)."""

from __future__ import annotations

from pathlib import Path

from dryrun.dryrun_testing import WORKFLOWS, one_job, plan_steps, write
from gpuci.dryrun._workflow import classify_uses

REPO = Path(__file__).resolve().parents[2]

OWN_ACTION = """\
name: my-action
inputs:
  greeting: {default: hi}
runs:
  using: composite
  steps:
    - run: echo "${{ inputs.greeting }}"
      shell: bash
"""


def test_the_checkouts_own_root_action_is_planned_as_a_local_action(tmp_path):
    write(tmp_path, OWN_ACTION, "action.yml")
    steps = "- uses: actions/checkout@v4\n- uses: ./\n  with: {greeting: hello}"
    wf = one_job(tmp_path, steps, f"{WORKFLOWS}/wf.yml")
    steps = plan_steps(tmp_path, wf)
    root = next(s for s in steps if s["uses"] == "./")
    assert root["verdict"] != "bad-input", root
    assert "local composite action ./" in root["detail"]


def test_a_composite_action_of_using_in_any_case_is_planned_step_by_step(tmp_path):
    """The runner compares ``using:`` case-blind (OrdinalIgnoreCase): ``using: Composite`` runs
    its steps; the plan called it another action, not judged."""
    write(tmp_path, OWN_ACTION.replace("using: composite", "using: Composite"), "act/action.yml")
    wf = one_job(tmp_path, "- uses: actions/checkout@v4\n- uses: ./act", f"{WORKFLOWS}/wf.yml")
    action = next(s for s in plan_steps(tmp_path, wf) if s["uses"] == "./act")
    assert action["detail"] == "local composite action ./act: no gpu-ci step inside", action
    assert action["command"] == "composite action (1 step(s))", action


def test_gpu_cis_generated_action_at_the_root_is_still_gpu_cis(tmp_path):
    (tmp_path / "action.yml").write_bytes((REPO / "action.yml").read_bytes())
    assert classify_uses("./", tmp_path) == (".", None)
    assert classify_uses("./") == (".", None)  # no checkout named: taken as gpu-ci's


def test_a_checkouts_own_actions_folder_of_a_gpu_ci_name_is_its_own(tmp_path):
    write(tmp_path, OWN_ACTION, "actions/retry-fetch/action.yml")
    assert classify_uses("./actions/retry-fetch", tmp_path) is None
    assert classify_uses("./actions/retry-fetch") is not None


def test_only_gpu_cis_own_repository_is_gpu_ci():
    assert classify_uses("my-org/ci-tools/actions/retry-fetch@v2") is None
    assert classify_uses("my-org/ci-tools@v2") is None
    assert classify_uses("my-org/GPU-CI/actions/retry-fetch@v2")[1].name == "retry-fetch"


def test_every_generated_action_starts_with_the_mark():
    from gpuci.dryrun._workflow import GENERATED_MARK

    for path in [REPO / "action.yml", *sorted((REPO / "actions").rglob("action.yml"))]:
        assert path.read_bytes().startswith(GENERATED_MARK), path
