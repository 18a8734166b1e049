"""The GitLab templates, verbatim, run by gitlab-ci-local (shell executor, no Docker).

gpu-ci is installed by the templates' own lines, ``.gpuci-install`` (gpuci-install.gitlab-ci.yml,
included from the project's .gitlab/ as a user's repository holds it): the source archive named
by ``GPUCI_SOURCE``, refused unless it hashes to ``GPUCI_SOURCE_SHA256``, then its
scripts/bootstrap.sh (requirements.lock with ``--require-hashes``, into a private venv under the
runner's cache, XDG_CACHE_HOME). The archive is this checkout (the files a job uses:
real_clients.INSTALLED) laid out as GitHub's archive of a commit is (file:// instead of
https://), made once per session (tests/actions/conftest.py), pinned by its sha256 as a user
pins theirs; the locked dependencies come from the developer's download caches (uv, pip) or
the index. gitlab-ci-local sets ``GITLAB_CI=false``; the templates' docs say to pass
``GITLAB_CI=true``, and so do the tests.

Each scenario runs once: the train template's push pipeline, then its merge-request pipeline
(which must hit the cache the first filled, and note the MR), not a third run of the same.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from real_clients import (
    client_env,
    gitlab_ci_local,
    http_ok_server,
    make_project,
)

from forges.fake_gitlab import FakeGitLab
from gpuci_testing import REPO
from pods.fake_runpod import FakeRunPod

BINARY, WHY_NOT = gitlab_ci_local()
pytestmark = [
    pytest.mark.skipif(BINARY is None, reason=WHY_NOT),
    # A hang guard, not a budget: a pipeline builds venvs with pip, 1-5 minutes on a busy
    # 2-core machine (300 s, the suite's default, cut one short there).
    pytest.mark.timeout(900),
]
TEMPLATES = REPO / "examples" / "gitlab"
GL_RUNNERS = "/gitlab/api/v4/user/runners"


@pytest.fixture(scope="module")
def install(
    gpuci_source: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """GPUCI_SOURCE (an archive of this checkout, as GitHub's of a commit), its sha256, and
    XDG_CACHE_HOME: one runner's cache for all the module's pipelines, kept as a persistent
    runner keeps it, so bootstrap installs the lock once and later jobs reuse that install
    (test_gitlab_install.py watches a first install)."""
    source, sha256 = gpuci_source
    cache = tmp_path_factory.mktemp("runner-cache")
    return {"GPUCI_SOURCE": source, "GPUCI_SOURCE_SHA256": sha256, "XDG_CACHE_HOME": str(cache)}


def project_with(root: Path, template: str, **files: str | Path) -> Path:
    """A user's repository holding ``template`` as its .gitlab-ci.yml and the install it
    includes, at the path the templates name."""
    return make_project(
        root,
        {
            ".gitlab-ci.yml": TEMPLATES / template,
            ".gitlab/gpuci-install.gitlab-ci.yml": TEMPLATES / "gpuci-install.gitlab-ci.yml",
            **files,
        },
    )


def pipeline(
    project: Path, tmp: Path, variables: dict[str, str], *jobs: str, validate: bool = True
) -> subprocess.CompletedProcess[str]:
    """gitlab-ci-local runs ``jobs`` (all: none named) of ``project``'s pipeline; ``validate``:
    it first checks the file against GitLab's JSON schema (over 0.5 CPU-s), once per file."""
    assert BINARY is not None
    cmd = [str(BINARY), "--force-shell-executor", "--shell-isolation", *jobs]
    if not validate:
        cmd.append("--no-json-schema-validation")
    for key, value in {"GITLAB_CI": "true", **variables}.items():
        cmd += ["--variable", f"{key}={value}"]
    done = subprocess.run(
        cmd,
        cwd=project,
        # PYTHONPATH="": the suite's src/ would shadow the pinned source bootstrap.sh links
        env=client_env(tmp / "home", PYTHONPATH=""),
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done


def report(project: Path, job: str) -> list[str]:
    """The dotenv report a job handed to later jobs."""
    path = project / ".gitlab-ci-local" / "artifacts" / job / ".gitlab-ci-reports" / "dotenv"
    return (path / "gpuci-outputs.env").read_text().splitlines()


def test_pods_template_deploys_lists_and_destroys(install, tmp_path):
    fake = FakeRunPod(steps_to_running=1).start()
    try:
        with http_ok_server() as proxy:
            project = project_with(tmp_path / "proj", "gpu-pods.gitlab-ci.yml")
            variables = {
                **install,
                "RUNPOD_API_KEY": fake.api_key,
                "RUNPOD_API_URL": fake.url,
                "GPUCI_RUNPOD_PROXY_URL": proxy + "/{pod_id}-{port}",
                "GPUCI_PODS_POLL_S": "0.2",
                # the template's ledger is the cache's bucket; a file store stands in for it
                "GPUCI_PODS_LEDGER": (tmp_path / "ledger").as_uri(),
            }
            done = pipeline(project, tmp_path, variables)
        text = done.stdout + done.stderr
        for job in ("deploy", "listing", "stop", "start", "destroy"):  # stop/start: a round trip
            assert re.search(rf"PASS  {job}\b", text), job
        assert len(fake.calls("POST", "/v2/pods")) == 1
        deployed = report(project, "deploy")
        assert len(deployed) <= 20
        pod_id = next(
            line.split("=", 1)[1] for line in deployed if line.startswith("GPUCI_POD_ID=")
        )
        # destroy (a later job) read the pod id from deploy's dotenv report and ended that pod.
        assert [c.path for c in fake.calls("DELETE")] == [f"/v2/pods/{pod_id}"]
        # gitlab-ci-local pads job names to the longest one in the file
        assert re.search(rf"destroy +> pods down: ok: 1 pod\(s\): {pod_id} terminated", text)
        assert fake.pods == {}
        assert fake.api_key not in text
    finally:
        fake.stop()


def test_train_template_passes_first_then_hits_and_notes_the_mr(install, tmp_path):
    """The push pipeline on main populates the cache, passes and hands on its report; then an
    open MR gets a merge-request pipeline: train must run there (or no note is posted), hit
    what the first filled, find the first run's baseline, and note the MR."""
    project = project_with(
        tmp_path / "proj",
        "train-gated.gitlab-ci.yml",
        **{"examples/train_tiny.py": REPO / "examples" / "train_tiny.py"},
    )
    variables = {
        **install,
        "GPUCI_FAKE_NVML": "h200",
        "GPUCI_STORE": (tmp_path / "store").as_uri(),
    }
    first = pipeline(project, tmp_path, variables, "train").stdout
    assert "populated tiny-data-v1 on a miss" in first
    assert "PASS  train" in first
    written = report(project, "train")
    assert len(written) <= 20, written
    assert "GPUCI_PASSED=true" in written

    with FakeGitLab() as gitlab:
        mr = {
            **variables,
            "CI_PIPELINE_SOURCE": "merge_request_event",
            "CI_MERGE_REQUEST_IID": "3",
            "CI_API_V4_URL": gitlab.gitlab_api,
            "CI_PROJECT_ID": "9",
            "GPUCI_GITLAB_TOKEN": gitlab.state.gitlab_token,
        }
        # the push pipeline validated this very file against GitLab's schema: not again
        listed = subprocess.run(
            [
                *(str(BINARY), "--list", "--no-json-schema-validation"),
                *("--variable", "CI_PIPELINE_SOURCE=merge_request_event"),
            ],
            cwd=project,
            env=client_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        assert re.search(r"^train +train +on_success", listed, re.M), listed
        second = pipeline(project, tmp_path, mr, "train", validate=False).stdout
    assert "PASS  train" in second
    assert "hit: restored tiny-data-v1" in second
    assert "populated tiny-data-v1" not in second
    assert "partial hit (metrics-baseline-main-" in second  # the first run's baseline
    notes = gitlab.state.notes.get("9!3", [])
    assert len(notes) == 1, gitlab.state.requests
    assert "<!-- gpuci-report:training -->" in notes[0]["body"]
    assert gitlab.state.gitlab_token not in second


def test_runner_template_starts_trains_and_stops(install, tmp_path):
    """gpu-runner.gitlab-ci.yml, every job: start-runner's real ``pods up --runner gitlab``
    creates a project runner on a fake GitLab and its pod on the fake RunPod; gitlab-ci-local
    runs ``train`` here, as if the pod had taken it; stop-runner (``when: always``) ends the
    pod and leaves no runner registered."""

    fake = FakeRunPod(steps_to_running=1).start()
    try:
        with FakeGitLab() as gitlab:
            project = project_with(
                tmp_path / "proj",
                "gpu-runner.gitlab-ci.yml",
                **{
                    # the user's scripts: base weights and data on a miss, then a model
                    "prepare.py": (
                        "import pathlib\n\n"
                        "for d in ('models/base', 'data/train'):\n"
                        "    pathlib.Path(d).mkdir(parents=True, exist_ok=True)\n"
                        "pathlib.Path('models/base/w.bin').write_bytes(b'w' * 1000)\n"
                        "pathlib.Path('data/train/d.txt').write_text('data')\n"
                    ),
                    "train.py": (
                        "import pathlib\n\n"
                        "assert pathlib.Path('models/base/w.bin').stat().st_size == 1000\n"
                        "pathlib.Path('out/model').mkdir(parents=True, exist_ok=True)\n"
                        "pathlib.Path('out/model/m.bin').write_bytes(b'm')\n"
                    ),
                },
            )
            variables = {
                **install,
                "RUNPOD_API_KEY": fake.api_key,
                "RUNPOD_API_URL": fake.url,
                "GPUCI_PODS_POLL_S": "0.2",
                "GPUCI_PODS_LEDGER": (tmp_path / "ledger").as_uri(),
                "GPUCI_STORE": (tmp_path / "store").as_uri(),
                "GPUCI_FAKE_NVML": "h200",
                "GPUCI_GITLAB_TOKEN": gitlab.state.gitlab_token,
                "CI_API_V4_URL": gitlab.gitlab_api,
                "CI_SERVER_URL": gitlab.base + "/gitlab",
                "CI_COMMIT_REF_PROTECTED": "true",  # where GitLab gives protected variables
            }
            done = pipeline(project, tmp_path, variables)
            text = done.stdout + done.stderr
            for job in ("start-runner", "train", "stop-runner"):
                assert re.search(rf"PASS  {job}\b", text), job

            # start-runner: one project runner, tagged for this pipeline, taking no untagged job.
            ((_, _, made),) = [r for r in gitlab.state.requests if r[:2] == ("POST", GL_RUNNERS)]
            assert made["runner_type"] == "project_type"
            assert made["run_untagged"] is False
            pipeline_id = re.search(r"pipeline-(\d+)", made["tag_list"])
            assert pipeline_id is not None, made
            assert made["tag_list"].split(",") == [f"pipeline-{pipeline_id[1]}"]  # its own only
            (token,) = gitlab.state.issued
            (created,) = fake.calls("POST", "/v2/pods")
            assert created.body["env"]["GPUCI_GITLAB_RUNNER_TOKEN"] == token
            assert created.body["image"].startswith("registry.example.com/")  # has gitlab-runner
            assert created.body["env"]["GPUCI_GITLAB_URL"] == gitlab.base + "/gitlab"
            assert gitlab.state.gitlab_token not in json.dumps(created.body)
            assert fake.api_key not in json.dumps(created.body)
            assert re.search(rf"start-runner +>   runner-name: {made['description']}$", text, re.M)
            assert any(
                line.startswith("GPUCI_POD_ID=pod") for line in report(project, "start-runner")
            )

            # train: the cache was filled by populate, and the model made.
            assert re.search(r"train +> gpu-setup: ok", text)
            assert (project / ".gitlab-ci-local/builds/train/out/model/m.bin").is_file()

            # stop-runner: no pod and no runner left.
            assert fake.pods == {}
            assert gitlab.state.runners == {}
            for secret in (fake.api_key, gitlab.state.gitlab_token, token):
                assert secret not in text
    finally:
        fake.stop()


def test_runner_template_in_an_mr_pipeline_on_an_unprotected_branch_says_why_it_skips(tmp_path):
    """GitLab gives protected variables only to protected refs: on a feature branch's MR the
    template must not start a runner (start-runner would fail without RUNPOD_API_KEY, and
    train would wait for a runner nobody makes); it says so and how to allow it."""
    project = project_with(tmp_path / "proj", "gpu-runner.gitlab-ci.yml")
    variables = {  # no GPUCI_SOURCE: no job that installs gpu-ci may run here
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_MERGE_REQUEST_IID": "3",
        "CI_COMMIT_REF_NAME": "feature-x",
        "CI_COMMIT_REF_PROTECTED": "false",
    }
    # test_runner_template_starts_trains_and_stops checks this file against GitLab's schema
    done = pipeline(project, tmp_path, variables, validate=False)
    text = done.stdout + done.stderr
    assert re.search(r"PASS  gpu-runner-skipped\b", text), text[-3000:]
    assert "are protected variables" in text
    for job in ("start-runner", "train", "stop-runner"):
        assert not re.search(rf"(PASS|FAIL)  {job}\b", text), job
