"""RunPod's 50 environment variables per pod: the fake refuses more, ``up`` never sends more."""

from __future__ import annotations

from fake_runpod import MAX_ENV_VARS

UP = dict(gpu_types="NVIDIA L40S", image="img", command="serve", ttl="30m", owner="alice")


def _env_lines(n: int) -> str:
    return "\n".join(f"SETTING_{i}=v{i}" for i in range(n))


def test_fake_refuses_a_51st_variable_on_create_and_patch(fake):
    body = {"name": "n", "image": "i", "gpu": {"id": "NVIDIA L40S"}}
    env = {f"K{i}": "v" for i in range(MAX_ENV_VARS)}
    status, pod = fake.api("POST", "/v2/pods", {**body, "env": env})
    assert status == 201
    status, problem = fake.api("POST", "/v2/pods", {**body, "env": {**env, "ONE_MORE": "v"}})
    assert status == 400 and set(problem) >= {"title", "status", "detail"}
    assert problem["status"] == 400 and "at most 50" in problem["detail"]
    status, problem = fake.api("PATCH", f"/v2/pods/{pod['id']}", {"env": {**env, "ONE_MORE": "v"}})
    assert status == 400 and fake.pods[pod["id"]]["env"] == env


def test_up_refuses_an_env_over_the_limit_before_any_api_call(fake, run):
    first = run("up", **UP, env="ONLY=1")
    assert first.code == 0, first.stdout
    ours = len(fake.calls("POST", "/v2/pods")[0].body["env"]) - 1  # what gpu-ci adds
    assert 0 < ours < MAX_ENV_VARS
    fake.requests.clear()
    refused = run("up", **UP, env=_env_lines(MAX_ENV_VARS - ours + 1))
    assert refused.code == 2, refused.stdout
    assert fake.requests == []  # not even the catalog
    line = refused.json["headline"]
    assert "\n" not in line and f"env has {MAX_ENV_VARS + 1} variables" in line
    assert f"{ours} added by gpu-ci" in line and "at most 50 per pod" in line
    assert (
        f"pass at most {MAX_ENV_VARS - ours} env lines" in refused.json["report"]["error"]["hint"]
    )
    assert "v1" not in line  # names counts, never values
    fits = run("up", **UP, env=_env_lines(MAX_ENV_VARS - ours))
    assert fits.code == 0, fits.stdout
    assert len(fake.calls("POST", "/v2/pods")[-1].body["env"]) == MAX_ENV_VARS


def test_dry_run_refuses_the_same_env(fake, run):
    plan = run("up", dry_run=True, **UP, env=_env_lines(MAX_ENV_VARS))
    assert plan.code == 2 and "RunPod allows at most 50" in plan.json["headline"]
    assert fake.requests == []
