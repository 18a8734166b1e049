"""``up --runner`` waits until the platform lists its runner online: a refused runner fails the
start job with its reason (not a day-long queue); a busy runner is never deleted mid-job."""

from __future__ import annotations

from pods_testing import RUN_ENV, up_runner

REFUSAL = (
    "GitHub refused runner 2.328.0: An error occurred: Runner version v2.328.0 is deprecated "
    "and cannot receive messages."
)


def _pod_says(fake, text: str):
    """What the pod's start script does on a refusal: PATCH its own name (its own key)."""

    def hook(_runner):
        (pod_id,) = fake.pods
        name = fake.pods[pod_id]["name"] + " refused: " + text
        assert fake.api("PATCH", f"/v2/pods/{pod_id}", {"name": name})[0] == 200

    return hook


def test_up_waits_until_the_runner_is_online(run, fake, api):
    api.state.online_after_reads = 3
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    (runner,) = api.state.runners.values()
    assert runner.status == "online" and runner.reads == 4
    assert f"runner {runner.name}: online" in r.stderr


def test_a_refused_runner_fails_up_with_the_pods_reason(run, fake, api):
    api.state.online_after_reads = None  # the listener never connects
    api.state.on_status_read = _pod_says(fake, REFUSAL)
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 3, r.stdout + r.stderr
    message = r.json["annotations"][0]["message"]
    assert message.startswith(REFUSAL), message
    assert "runner-version" in message  # the fix
    assert fake.pods == {} and api.state.runners == {}  # the pod ended, its runner deleted


def test_a_runner_pod_that_ends_before_its_runner_is_online_fails_up(run, fake, api):
    api.state.online_after_reads = None

    def pod_ends(_runner):
        for pod_id in list(fake.pods):
            fake.api("DELETE", f"/v2/pods/{pod_id}")

    api.state.on_status_read = pod_ends
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 3, r.stdout + r.stderr
    assert "before runner gpuci-" in r.json["annotations"][0]["message"]
    assert "came online" in r.json["annotations"][0]["message"]
    assert api.state.runners == {}


def test_without_wait_online_up_returns_once_the_pod_runs(run, fake, api):
    api.state.online_after_reads = None
    r = up_runner(run, api.github_env(**RUN_ENV), runner_wait_online="false")
    assert r.code == 0, r.stdout + r.stderr
    assert not [p for m, p, _ in api.state.requests if m == "GET" and p.split("/")[-1].isdigit()]


def test_a_busy_runner_is_left_registered_and_the_sweep_goes_on(run, fake, api, clock):
    """GitHub answers 422 to deleting a runner in the middle of a job; down warns and still
    deletes the other runners whose pod is gone."""
    busy = api.state.add(f"gpuci-aaaaaa-{int(clock.now()) - 3600}", "/repos/octo/gpu")
    busy.busy = True
    idle = api.state.add(f"gpuci-bbbbbb-{int(clock.now()) - 3600}", "/repos/octo/gpu")
    r = run("reap", extra_env=api.github_env())
    assert r.code == 0, r.stdout + r.stderr
    assert busy.name in api.state.names() and idle.name not in api.state.names()
    assert f"runner {busy.name} is running a job" in r.stdout + r.stderr


def test_a_gitlab_token_that_may_only_create_runners_still_starts_one(run, fake, api):
    """GitLab's create_runner scope makes runners but may not read them (403
    insufficient_scope): up registers, starts the pod and says it cannot wait, not fail."""
    api.state.gitlab_scopes = {"create_runner"}
    r = up_runner(
        run, api.gitlab_env(CI_PIPELINE_URL="https://gitlab.example/p/-/pipelines/5"), "gitlab"
    )
    assert r.code == 0, r.stdout + r.stderr
    assert "cannot read runner" in r.stderr and "read_api" in r.stderr
    assert len(api.state.runners) == 1 and len(fake.pods) == 1


def test_the_fake_gitlab_refuses_a_project_path_as_project_id(api):
    import httpx

    answer = httpx.post(
        api.gitlab_api + "/user/runners",
        headers={"PRIVATE-TOKEN": api.state.gitlab_token},
        json={
            "runner_type": "project_type",
            "project_id": "octo/gpu",
            "tag_list": "run-77",
            "locked": True,
            "run_untagged": False,
        },
    )
    assert answer.status_code == 400 and "project_id is invalid" in answer.text
