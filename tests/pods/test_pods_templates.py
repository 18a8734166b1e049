"""The GitLab pods templates: valid GitLab CI, and stop/start act on a living pod before destroy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PODS = REPO / "examples" / "gitlab" / "gpu-pods.gitlab-ci.yml"
VLLM = REPO / "examples" / "gitlab" / "vllm-pods.gitlab-ci.yml"
RUNNER = REPO / "examples" / "gitlab" / "gpu-runner.gitlab-ci.yml"
INSTALL = REPO / "examples" / "gitlab" / "gpuci-install.gitlab-ci.yml"  # the templates include it
CHECKER = REPO / ".venv" / "bin" / "check-jsonschema"


@pytest.mark.skipif(not CHECKER.exists(), reason="check-jsonschema absent (installed by dev.sh)")
@pytest.mark.parametrize("path", [PODS, VLLM, RUNNER, INSTALL], ids=lambda p: p.name)
def test_templates_are_valid_gitlab_ci(path):
    proc = subprocess.run(
        [str(CHECKER), "--builtin-schema", "vendor.gitlab-ci", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _rule_when(job: dict, variables: dict[str, str]) -> str:
    for rule in job.get("rules", [{"when": "on_success"}]):
        cond = rule.get("if")
        if cond is None:
            return rule.get("when", "on_success")
        parts = [p.strip() for p in cond.split("||")]
        hit = False
        for part in parts:
            name, op, want = part.split()
            equal = variables.get(name.lstrip("$"), "") == want.strip('"')
            hit = hit or (equal if op == "==" else not equal)
        if hit:
            return rule.get("when", "on_success")
    return "never"


def test_stop_and_start_act_on_the_living_pod_and_destroy_comes_last():
    ci = yaml.safe_load(PODS.read_text())
    stages = ci["stages"]
    assert stages.index("stop") < stages.index("start") < stages.index("destroy")
    for name in ("stop", "start"):
        job = {**ci[".on-the-pod"], **ci[name]}
        assert _rule_when(job, {}) == "on_success"  # a normal pipeline: automatic
        assert _rule_when(job, {"KEEP_POD": "true"}) == "manual"
    assert ci["destroy"]["stage"] == "destroy"
    assert _rule_when(ci["destroy"], {}) == "always"  # after a failure too
    assert _rule_when(ci["destroy"], {"KEEP_POD": "true"}) == "manual"
    for job in ("deploy", "stop", "start", "destroy"):
        merged = {**ci.get(".on-the-pod", {}), **ci[job]}
        assert _rule_when(merged, {"REAP": "true"}) == "never"
    assert _rule_when(ci["reap"], {"REAP": "true"}) == "on_success"
    assert "--untagged-older-than" in " ".join(ci["reap"]["script"])
    assert _rule_when(ci["cost-report"], {"COST_REPORT": "true"}) == "on_success"


def test_runner_template_routes_train_to_its_own_pod_and_always_stops():
    """train's tags are exactly the runner's (so only this pipeline's pod takes it), only the
    jobs that start and stop the runner are in the environment the secrets are scoped to, and
    stop-runner runs last, after a failure too."""
    ci = yaml.safe_load(RUNNER.read_text())
    assert ci["stages"] == ["start-runner", "train", "stop-runner"]
    start = " ".join(ci["start-runner"]["script"])
    labels = start.split("--runner-labels ")[1].split()[0].strip('"').split(",")
    assert labels == ["pipeline-$CI_PIPELINE_ID"]  # this pipeline's only
    assert ci["train"]["tags"] == labels
    assert "--image" in start  # the default image has no gitlab-runner
    protected = {"if": '$CI_COMMIT_REF_PROTECTED == "true"'}
    assert ci["stop-runner"]["rules"] == [{**protected, "when": "always"}]
    assert ci["stop-runner"]["script"] == ["gpuci pods down"]
    control = ci[".control"]["environment"]
    assert control == {"name": "gpu-runners", "action": "access"}
    assert ci["start-runner"]["extends"] == ci["stop-runner"]["extends"] == ".control"
    # only where GitLab gives the protected variables; elsewhere a job says why not
    assert ci[".protected-ref"]["rules"] == [protected]
    assert ci[".control"]["extends"] == [".gpuci", ".protected-ref"]
    assert "environment" not in ci["train"]
    assert ci["train"]["extends"] == [".gpuci", ".protected-ref"]
    assert ci["gpu-runner-skipped"]["rules"] == [{"if": '$CI_COMMIT_REF_PROTECTED != "true"'}]
