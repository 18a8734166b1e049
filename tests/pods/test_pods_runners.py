"""``pods up --runner``, and the runner half of ``down``/``reap``, against fake RunPod, GitHub
and GitLab on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pods_testing import L40S, RUN_ENV, up_runner

from forges.fake_forges import FakeForges as FakeRunnersAPI
from gpuci.pods._runners import boot as runner_boot
from gpuci.pods._runners import registry as runners
from gpuci.pods._runpod import selfstop


def _secrets(api: FakeRunnersAPI) -> list[str]:
    s = api.state
    return [s.github_token, s.gitlab_token, s.job_token, *s.issued]


def _nothing_leaked(api, fake, run, tmp_path: Path) -> None:
    """No credential in the output, the log, the ledger or the journal."""
    texts = [run.stdout, run.stderr]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            texts.append(path.read_text(errors="replace"))
    for secret in [*_secrets(api), fake.api_key]:
        for text in texts:
            assert secret not in text


def test_up_github_registers_a_jit_runner_and_hands_the_pod_only_its_config(
    run, fake, api, tmp_path
):
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    name = r.outputs["runner-name"]
    assert name.startswith("gpuci-") and runners.registered_at(name) is not None
    (registered,) = api.state.runners.values()
    assert registered.name == name
    assert registered.labels == ["run-77"]  # this run's only: no other job can take it
    assert registered.scope == "/repos/octo/gpu"
    post = [b for m, p, b in api.state.requests if p.endswith("generate-jitconfig")]
    assert post == [
        {
            "name": name,
            "labels": ["run-77"],
            "runner_group_id": 1,
            "work_folder": "_work",
        }
    ]
    (create,) = fake.calls("POST", "/v2/pods")
    body = create.body
    assert body["image"] == runners.DEFAULT_IMAGE
    assert body["args"] == selfstop.ARGS
    env = body["env"]
    assert env["GPUCI_START_COMMAND"] == runner_boot.SCRIPT
    assert env[runners.ENV_JITCONFIG] == api.state.issued[0]
    assert env[runners.ENV_NAME] == name and env[runners.ENV_ID] == str(registered.id)
    assert env["GPUCI_ACTIONS_RUNNER_SHA256"] == runner_boot.RUNNER_SHA256
    assert env["GPUCI_SELF_STOP_ACTION"] == "terminate"
    # never the CI's RunPod key nor the admin token
    flat = json.dumps(body)
    assert fake.api_key not in flat and api.state.github_token not in flat
    assert r.outputs["pod-id"] == next(iter(fake.pods))
    _nothing_leaked(api, fake, r, tmp_path)


def test_up_gitlab_creates_a_project_runner(run, fake, api, tmp_path):
    r = up_runner(
        run,
        api.gitlab_env(CI_PIPELINE_URL="https://gitlab.example/p/-/pipelines/5"),
        "gitlab",
        runner_idle_timeout="90s",
    )
    assert r.code == 0, r.stdout + r.stderr
    (registered,) = api.state.runners.values()
    assert registered.scope == "project:42" and registered.name == r.outputs["runner-name"]
    (post,) = [b for m, p, b in api.state.requests if p.endswith("/user/runners")]
    assert post == {
        "runner_type": "project_type",
        "project_id": 42,
        "description": registered.name,
        "tag_list": "run-77",
        "locked": True,
        "run_untagged": False,
    }
    env = fake.calls("POST", "/v2/pods")[0].body["env"]
    assert env[runners.ENV_GITLAB_RUNNER_TOKEN] == registered.token
    assert env[runners.ENV_GITLAB_URL] == api.base + "/gitlab"
    assert env[runners.ENV_GITLAB_API_URL] == api.gitlab_api
    assert env[runners.ENV_IDLE_S] == "90"
    assert api.state.gitlab_token not in json.dumps(env)
    _nothing_leaked(api, fake, r, tmp_path)


@pytest.mark.parametrize("platform", ["github", "gitlab"])
def test_dry_run_plans_the_call_and_a_placeholder_and_calls_nothing(
    run, fake, api, tmp_path, platform
):
    extra = api.github_env() if platform == "github" else api.gitlab_env()
    r = up_runner(run, extra, platform, dry_run=True)
    assert r.code == 0, r.stdout + r.stderr
    assert api.state.requests == [] and fake.requests == []
    planned = r.json["report"]["plan"]
    call = planned["runner"]["request"]
    if platform == "github":
        assert call["url"] == api.github_api + "/repos/octo/gpu/actions/runners/generate-jitconfig"
        secret_key = runners.ENV_JITCONFIG
    else:
        assert call["url"] == api.gitlab_api + "/user/runners"
        secret_key = runners.ENV_GITLAB_RUNNER_TOKEN
    env = planned["requests"][0]["body"]["env"]
    assert env[secret_key] == runners.PLACEHOLDER[secret_key]
    assert r.outputs["runner-name"] == planned["runner"]["name"]
    _nothing_leaked(api, fake, r, tmp_path)


def test_dry_run_without_any_ci_env_still_plans(run, fake):
    r = run("up", dry_run=True, gpu_types=L40S, runner="github", runner_labels="run-77")
    assert r.code == 0, r.stdout + r.stderr
    messages = " ".join(a["message"] for a in r.json["annotations"])
    assert "GPUCI_RUNNER_TOKEN is not set" in messages
    assert r.json["report"]["plan"]["runner"]["scope"] == "repo:OWNER/REPO"


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ({"runner_labels": None}, {}, "runner-labels is required with runner outside CI"),
        ({"command": "python train.py"}, {}, "command cannot be combined with runner"),
        ({}, {"GPUCI_RUNNER_TOKEN": ""}, "GPUCI_RUNNER_TOKEN is not set"),
        (
            {},
            {"GPUCI_RUNNER_TOKEN": "", "GITHUB_TOKEN": "ghs_jobtoken123"},
            "the job's GITHUB_TOKEN cannot create runners",
        ),
        (
            {},
            {"GPUCI_RUNNER_TOKEN": "ghs_same123", "GITHUB_TOKEN": "ghs_same123"},
            "the job's GITHUB_TOKEN cannot create runners",
        ),
        ({}, {"GITHUB_REPOSITORY": ""}, "GITHUB_REPOSITORY is not set"),
    ],
    ids=["no-labels", "command", "no-token", "only-github-token", "github-token", "no-repo"],
)
def test_bad_runner_input_is_exit_2_in_one_line_and_makes_nothing(
    run, fake, api, flags, env, expected
):
    args = {"gpu_types": L40S, "runner": "github", "runner_labels": "run-77", **flags}
    r = run("up", extra_env=api.github_env(**env), **args)
    assert r.code == 2, r.stdout + r.stderr
    message = r.json["annotations"][0]["message"]
    assert expected in message and "\n" not in message
    assert api.state.runners == {} and fake.pods == {}
    assert "ghs_jobtoken123" not in r.stdout + r.stderr


def test_the_jobs_installation_token_refused_by_github_says_what_to_make(run, fake, api):
    env = api.github_env(GPUCI_RUNNER_TOKEN=api.state.job_token)
    r = up_runner(run, env)
    assert r.code == 2, r.stdout + r.stderr
    message = r.json["annotations"][0]["message"]
    assert "the job's GITHUB_TOKEN cannot create runners" in message
    assert "Administration: read and write" in message
    assert fake.pods == {} and api.state.job_token not in r.stdout + r.stderr
    assert "could not delete runner" not in r.stderr  # refused: there is nothing to delete
    assert not [m for m, p, _ in api.state.requests if m == "GET"]  # and nothing looked for
    other = up_runner(run, api.github_env())
    assert other.code == 0  # a token with the rights: the message was about the job's token


def test_gitlab_without_its_token_names_the_variable(run, fake, api):
    env = api.gitlab_env(GPUCI_GITLAB_TOKEN="")
    r = up_runner(run, env, "gitlab")
    assert r.code == 2
    assert "GPUCI_GITLAB_TOKEN is not set" in r.json["annotations"][0]["message"]


@pytest.mark.parametrize("platform", ["github", "gitlab"])
def test_a_pod_that_never_places_leaves_no_runner(run, fake, api, platform):
    fake.no_capacity.add(L40S)
    extra = api.github_env() if platform == "github" else api.gitlab_env()
    r = up_runner(run, extra, platform, placement_timeout="1s")
    assert r.code != 0
    assert api.state.runners == {}, "the registration outlived the failed up"
    assert fake.pods == {}


def test_a_pod_that_fails_to_start_leaves_neither_pod_nor_runner(run, fake, api):
    fake.fail_on_start.add(L40S)
    r = up_runner(run, api.github_env())
    assert r.code != 0
    assert api.state.runners == {} and fake.pods == {}


def test_a_lost_registration_answer_is_cleaned_up_by_name(run, fake, api, monkeypatch):
    """The runner exists but up never learnt its id (the answer was lost): delete by name."""
    from gpuci.errors import InfraError
    from gpuci.pods._runners.api import GitHubRunners

    real = GitHubRunners.register

    def lost(self, name, labels, group_id):
        real(self, name, labels, group_id)
        raise InfraError("GitHub API answered HTTP 502", hint="rerun")

    monkeypatch.setattr(GitHubRunners, "register", lost)
    r = up_runner(run, api.github_env())
    assert r.code == 3
    assert api.state.runners == {} and fake.pods == {}


@pytest.mark.parametrize("platform", ["github", "gitlab"])
def test_a_registration_is_never_repeated_blindly(run, fake, api, platform):
    """The runner was made but the answer was lost (502): a retry would meet 409 (GitHub) or
    make a second runner whose twin nobody deletes (GitLab). One POST, then delete by name."""
    api.state.lose_answers = 1
    env = api.github_env() if platform == "github" else api.gitlab_env()
    r = up_runner(run, env, platform)
    assert r.code == 3, r.stdout + r.stderr
    posts = [q for q in api.state.requests if q[0] == "POST"]
    assert len(posts) == 1, posts
    assert api.state.runners == {} and fake.pods == {}


# ----- down / reap ---------------------------------------------------------------------------
def _up(run, api, **env):
    # a label per up (several pods of one run are legs: each needs its own)
    label = f"run-{env.get('GITHUB_RUN_ID', '77')}-{len(api.state.requests)}"
    r = up_runner(run, api.github_env(**env), runner_labels=label)
    assert r.code == 0, r.stdout + r.stderr
    return r.outputs["pod-id"], r.outputs["runner-name"]


def test_down_in_ci_ends_the_runs_pods_and_their_runners(run, fake, api, clock):
    _, name = _up(run, api, **RUN_ENV)
    other_pod, other_name = _up(run, api, GITHUB_RUN_ID="78")  # another run: left alone
    hand_made = api.state.add("my-laptop-runner", "/repos/octo/gpu")
    r = run("down", extra_env=api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    assert set(fake.pods) == {other_pod}
    assert api.state.names() == sorted([other_name, hand_made.name])
    assert [d["runner"] for d in r.json["report"]["runners_deleted"]] == [name]


def test_down_deletes_only_the_runner_a_pod_really_registered(run, fake, api, clock):
    """A pod whose env was edited to name another runner's id: down ends the pod, and the
    runner with that id (not the pod's name) stays."""
    pod_id, name = _up(run, api, **RUN_ENV)
    hand_made = api.state.add("my-laptop-runner", "/repos/octo/gpu")
    fake.pods[pod_id]["env"]["GPUCI_RUNNER_ID"] = str(hand_made.id)
    r = run("down", extra_env=api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    assert fake.pods == {}
    assert "my-laptop-runner" in api.state.names()
    assert name not in api.state.names()  # its own runner: swept by name from the ledger


def test_down_and_reap_sweep_runners_whose_pod_is_gone_after_the_grace(run, fake, api, clock):
    old = api.state.add(f"gpuci-aaaaaa-{int(clock.now()) - 3600}", "/repos/octo/gpu")
    young = api.state.add(f"gpuci-bbbbbb-{int(clock.now()) - 60}", "/repos/octo/gpu")
    foreign = api.state.add(f"gpuci-cccccc-{int(clock.now()) - 3600}", "/orgs/octo")
    r = run("reap", extra_env=api.github_env())
    assert r.code == 0, r.stdout + r.stderr
    remaining = api.state.names()
    assert old.name not in remaining
    assert young.name in remaining  # its pod may still be on its way
    assert foreign.name in remaining  # another scope: not ours to judge
    clock.advance(runners.ORPHAN_GRACE_S)
    r = run("down", pod_id="nothing", extra_env=api.github_env())
    assert young.name not in api.state.names()


def test_reap_terminates_runner_pods_whose_runner_is_gone(run, fake, api, tmp_path):
    pod_id, name = _up(run, api)
    keep_pod, _ = _up(run, api)
    plain = run("up", gpu_types=L40S, image="img", command="sleep 1")  # no runner
    elsewhere, _ = _up(run, api, GITHUB_REPOSITORY="octo/other")  # another repo's runner
    (rid,) = [r.id for r in api.state.runners.values() if r.name == name]
    del api.state.runners[rid]  # its one job is over (GitHub removed the JIT runner)
    r = run("reap", extra_env=api.github_env())
    assert r.code == 0, r.stdout + r.stderr
    assert pod_id not in fake.pods
    assert keep_pod in fake.pods and plain.outputs["pod-id"] in fake.pods
    assert elsewhere in fake.pods  # its runner is not in octo/gpu's list, nor should it be
    assert r.json["report"]["runner_pods_terminated"][0]["pod"] == pod_id
    ledger = "".join(p.read_text() for p in (tmp_path / "ledger").rglob("*") if p.is_file())
    assert "runner gone" in ledger


def test_reap_never_judges_a_runner_gone_from_a_cut_listing(run, fake, api):
    """More runners than the client pages through: the pod's own runner is past the cut.
    Treating the cut list as whole would terminate a pod that may be running a job."""
    from gpuci.forges._rest import MAX_PAGES

    for i in range(MAX_PAGES * api.state.page_size + 1):
        api.state.add(f"other-{i}", "/repos/octo/gpu")
    pod_id, _ = _up(run, api)
    r = run("reap", extra_env=api.github_env())
    assert r.code == 0, r.stdout + r.stderr
    assert pod_id in fake.pods
    messages = " ".join(a["message"] for a in r.json["annotations"])
    assert f"more than {MAX_PAGES} pages of runners" in messages


def test_reap_without_a_runner_token_leaves_runner_pods_and_says_so(run, fake, api):
    _up(run, api)
    r = run("reap")
    assert r.code == 0
    assert len(fake.pods) == 1
    messages = " ".join(a["message"] for a in r.json["annotations"])
    assert "runner registrations were not checked" in messages


def test_gitlab_down_deletes_the_runner_of_the_pod_it_ends(run, fake, api):
    pipeline = {"CI_PIPELINE_URL": "https://gitlab.example/p/-/pipelines/5"}
    r = up_runner(run, api.gitlab_env(**pipeline), "gitlab")
    assert r.code == 0
    r = run("down", extra_env=api.gitlab_env(**pipeline))
    assert r.code == 0, r.stdout + r.stderr
    assert fake.pods == {} and api.state.runners == {}


def test_down_deletes_its_runs_runner_whose_pod_already_ended_itself(run, fake, api):
    """The idle timeout killed the runner (still registered) and the pod terminated itself:
    the run's own down finds the runner in the ledger and deletes it, without the grace."""
    pod_id, name = _up(run, api, **RUN_ENV)
    _, other = _up(run, api, GITHUB_RUN_ID="78")  # another run's: its pod is alive
    assert fake.api("DELETE", f"/v2/pods/{pod_id}")[0] == 204
    stray = api.state.add(
        f"gpuci-dddddd-{int(runners.registered_at(name) or 0)}", "/repos/octo/gpu"
    )
    r = run("down", extra_env=api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    assert name not in api.state.names(), r.stderr
    assert other in api.state.names() and stray.name in api.state.names()


def test_the_runner_registers_only_this_runs_label_and_refuses_a_shared_one(run, fake, api):
    """GitHub gives a queued job to any runner holding every label it asks for: a one-job
    runner with gpu-large (or self-hosted) could be taken by another workflow's job."""
    env = api.github_env(**RUN_ENV)
    default = up_runner(run, env, runner_labels=None)  # the default label
    assert default.code == 0, default.stdout
    (registered,) = api.state.runners.values()
    assert registered.labels == ["run-77"]  # from GITHUB_RUN_ID, and nothing shared
    for shared in ("gpu-large,run-77", "self-hosted,run-77", "run-778"):
        refused = up_runner(run, env, runner_labels=shared)
        assert refused.code == 2, refused.stdout
        assert "is not this run's" in refused.json["headline"]
        assert "run-${{ github.run_id }}" in refused.json["headline"]
    assert len(fake.calls("POST", "/v2/pods")) == 1 and len(api.state.runners) == 1
    outside = up_runner(run, api.github_env(), runner_labels="gpu-large")
    assert outside.code == 0  # no run id to check outside CI: only self-hosted is said
    selfhosted = up_runner(run, api.github_env(), runner_labels="self-hosted,x")
    assert selfhosted.code == 0
    (said,) = [a for a in selfhosted.json["annotations"] if "not this run's" in a["message"]]
    assert "self-hosted" in said["message"] and said["level"] == "warning"
    gl = up_runner(run, api.gitlab_env(CI_PIPELINE_ID="5"), "gitlab", runner_labels=None)
    assert gl.code == 0, gl.stdout
    body = [b for m, p, b in api.state.requests if p.endswith("/user/runners")][-1]
    assert body["tag_list"] == "pipeline-5" and body["locked"] is True
    assert body["run_untagged"] is False


def test_an_unknown_runner_group_is_one_line_and_leaves_nothing(run, fake, api):
    """GitHub answers 404 for a runner_group_id that is not a group of the scope."""
    r = up_runner(run, api.github_env(), runner_group_id=7)
    assert r.code == 2, r.stdout + r.stderr
    message = r.json["annotations"][0]["message"]
    assert "No runner group found with identifier 7" in message and "\n" not in message
    assert api.state.runners == {} and fake.pods == {}
    api.state.groups["/repos/octo/gpu"] = {1, 7}
    made = up_runner(run, api.github_env(), runner_group_id=7)
    assert made.code == 0, made.stdout + made.stderr


def test_gitlab_reap_leaves_the_group_and_instance_runners_the_project_list_holds(
    run, fake, api, clock
):
    """GitLab lists a project's runners with its groups' and the instance's: old, named as
    gpu-ci names its own, and still not gpu-ci's to delete (nor deletable by this token)."""
    stamp = int(clock.now()) - 3600
    old = api.state.add(f"gpuci-aaaaaa-{stamp}", "project:42")
    shared = api.state.add(f"gpuci-bbbbbb-{stamp}", "instance")
    grouped = api.state.add(f"gpuci-cccccc-{stamp}", "group:7")
    r = run("reap", extra_env=api.gitlab_env())
    assert r.code == 0, r.stdout + r.stderr
    assert api.state.names() == sorted([shared.name, grouped.name])
    deletes = [p for m, p, _ in api.state.requests if m == "DELETE"]
    assert deletes == [f"/gitlab/api/v4/runners/{old.id}"]


def test_gitlab_refusing_to_delete_a_runner_of_two_projects_is_one_warning(run, fake, api):
    """GitLab answers 403 to deleting a project runner assigned to more than one project."""
    pipeline = {"CI_PIPELINE_URL": "https://gitlab.example/p/-/pipelines/5"}
    up = up_runner(run, api.gitlab_env(**pipeline), "gitlab")
    assert up.code == 0, up.stdout + up.stderr
    (runner,) = api.state.runners.values()
    runner.projects.append("43")  # someone enabled it for another project
    r = run("down", extra_env=api.gitlab_env(**pipeline))
    assert r.code == 0 and fake.pods == {}  # the pod ends all the same
    (warned,) = [a["message"] for a in r.json["annotations"] if a["level"] == "warning"]
    assert "HTTP 403" in warned and "associated with more than one project" in warned
    assert list(api.state.runners) == [runner.id]


def test_two_legs_of_one_run_with_the_same_label_are_refused_before_any_pod(run, fake, api):
    """Matrix legs sharing the default run-<id> would take each other's runner: the second
    up is exit 2 naming the runner that has the label and the per-leg fix; a label per leg
    (the run id plus the leg) registers."""
    env = api.github_env(**RUN_ENV)
    first = up_runner(run, env, runner_labels=None)
    assert first.code == 0, first.stdout
    second = up_runner(run, env, runner_labels=None)
    assert second.code == 2, second.stdout
    (taken,) = api.state.runners.values()
    assert f"run-77 are already on runner {taken.name}" in second.json["headline"]
    assert "strategy.job-index" in second.json["headline"]
    assert len(fake.calls("POST", "/v2/pods")) == 1 and len(api.state.runners) == 1
    leg = up_runner(run, env, runner_labels="run-77-1")
    assert leg.code == 0, leg.stdout
    assert sorted(r.labels[0] for r in api.state.runners.values()) == ["run-77", "run-77-1"]


def test_one_github_runner_listing_with_one_check_for_pods_and_quarantine(monkeypatch):
    """``pods`` (down, reap, a taken name) and quarantine read GitHub's runner list the one
    way: an entry whose id is no number is no runner. Before, ``pods`` took ``"id": true``
    (a bool is an int to Python) for runner 1, and quarantine failed on it by name."""
    from gpuci.forges._rest import ApiClient
    from gpuci.forges._runner_admin import GitHubRunnerLabels
    from gpuci.pods._runners.api import GitHubRunners, Listed

    page = [
        {"id": True, "name": "gpu-1", "labels": [{"name": "gpu"}]},
        {"id": "7", "name": "gpu-1"},
        {"id": 9, "name": None},
        {"id": 5, "name": "gpu-1", "status": "online", "labels": [{"name": "gpu"}, "x"]},
    ]
    monkeypatch.setattr(ApiClient, "pages", lambda self, *a, **k: iter([page]))
    pods = GitHubRunners("http://127.0.0.1:9", "token", "repo:o/r")
    assert pods.listed() == [Listed(5, "gpu-1", "online", ("gpu",))]
    quarantine = GitHubRunnerLabels("http://127.0.0.1:9", "token")
    found = quarantine.find("gpu-1", "/repos/o/r")
    assert found is not None and (found.runner_id, found.labels) == (5, ("gpu",))


@pytest.mark.parametrize("rid", ["²", "١٢", "-1", " 7"])
def test_a_runner_pods_id_no_int_reads_is_no_id(rid):
    """The pod's env is RunPod's answer: "²" passed isdigit() and int() raised, so one such
    pod stopped down/reap's runner sweep with a traceback."""
    env = {runners.ENV_PLATFORM: "github", runners.ENV_NAME: "gpuci-abcdef-1700000000"}
    found = runners.scope_of({"id": "p1", "env": {**env, runners.ENV_ID: rid}})
    assert found == ("github", "", "gpuci-abcdef-1700000000", None)
