"""``dry-run`` of a workflow: find gpu-ci steps, resolve literal inputs, judge the plan."""

import json
import subprocess

import pytest

from counting_server import CountingServer
from dryrun.dryrun_testing import (
    WORKFLOWS,
    dry_run,
    matrix_job,
    one_job,
    plan,
    plan_steps,
    runner_hash_files,
    steps_of,
    write,
)
from gpuci.dryrun import classify_uses
from gpuci.dryrun._calls import network_needed
from gpuci.dryrun._contexts import hash_files
from gpuci.dryrun._expressions import Unknown
from gpuci_testing import REPO, clean_env, run_cli_here


def test_classify_uses():
    assert classify_uses("acme/gpu-ci/actions/gpu-setup@v1")[1].name == "gpu-setup"
    assert classify_uses("./actions/cache-weights/save") == (
        "actions/cache-weights/save",
        classify_uses("acme/gpu-ci/actions/cache-weights/save@v2")[1],
    )
    assert classify_uses("acme/gpu-ci/actions/cache-weights@main")[1].name == "restore"
    assert classify_uses("acme/gpu-ci@v1") == (".", None)
    assert classify_uses("./") == (".", None)
    assert classify_uses("actions/checkout@v4") is None
    assert classify_uses("acme/gpu-ci/actions/no-such@v1") == ("actions/no-such", None)


def test_root_action_splits_inputs_by_prefix(tmp_path):
    wf = one_job(
        tmp_path,
        """
              - uses: acme/gpu-ci@v1
                with:
                  min-memory-gb: 40
                  cache-key: w-v1
                  cache-path: models
                  smoke: true
                  smoke-budget-seconds: 20
              - uses: acme/gpu-ci@v1
                with:
                  cache-key: w-v1
                  cache-path: models
                  budget-seconds: 20
    """,
    )
    proc = dry_run(tmp_path, wf, "--json")
    steps = steps_of(proc)
    assert steps[0]["command"] == "gpu-setup + cache-weights restore + gpu-smoke"
    assert steps[0]["verdict"] in ("ok", "would-fail")
    restore = steps[0]["plans"][1]
    assert "w-v1" in restore["headline"]
    # an input of a part under its bare name is a typo at the root: bad input, named
    # skipped after the first step fails here (no GPU), and still judged: its input is a typo
    assert (steps[1]["verdict"], steps[1]["planned"]) == ("skipped", "bad-input")
    assert "unknown input(s) budget-seconds" in steps[1]["detail"]
    assert proc.returncode == 2


def test_malformed_input_names_step_and_input(tmp_path):
    wf = write(
        tmp_path,
        """
        on: push
        jobs:
          train:
            runs-on: gpu-large
            steps:
              - uses: actions/checkout@v4
              - name: Check GPUs
                uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  min-memory-gb: lots
              - run: python train.py
    """,
    )
    proc = dry_run(tmp_path, wf)
    assert proc.returncode == 2, proc.stdout
    assert "job train, step 2 (Check GPUs)" in proc.stdout
    assert "min-memory-gb" in proc.stdout and "'lots'" in proc.stdout
    # the plan is the result, on stdout; the runner would not run step 3 after step 2 fails
    assert "step 3: python train.py [skipped here: step 2 (Check GPUs) has bad input" in proc.stdout


def test_unknown_input_is_bad_input(tmp_path):
    wf = one_job(tmp_path, "- uses: acme/gpu-ci/actions/gpu-setup@v1\n  with: {min-memory: 40}")
    proc = dry_run(tmp_path, wf, "--json")
    assert proc.returncode == 2
    step = steps_of(proc)[0]
    assert step["verdict"] == "bad-input"
    assert "min-memory" in step["detail"] and "min-memory-gb" in step["detail"]


def test_expressions_are_reported_not_guessed(tmp_path):
    fetch = "- uses: acme/gpu-ci/actions/retry-fetch@v1\n  with: {url: '${{ vars.MODEL_URL }}'}"
    wf = one_job(tmp_path, fetch)
    (step,) = plan_steps(tmp_path, wf)
    assert step["unresolved"] == ["url"]
    assert "needs run-time value(s) for url" in step["plans"][0]["headline"]


def test_an_input_that_is_one_of_two_and_given_as_an_expression_is_not_bad_input(tmp_path):
    """restore needs key or manifest; a key built by an expression is provided at run time."""
    wf = one_job(
        tmp_path,
        """
              - uses: acme/gpu-ci/actions/cache-weights@v1
                with:
                  key: base-weights-${{ hashFiles('weights.sha256') }}
                  path: weights
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with:
                  min-memory-gb: lots
                  require-gpu: ${{ vars.REQUIRE }}
    """,
    )
    proc = dry_run(tmp_path, wf, "--json")
    restore, setup = steps_of(proc)
    assert restore["unresolved"] == ["key"]
    assert restore["verdict"] == "not-evaluated", restore  # never "ok": nothing was checked
    headline = restore["plans"][0]["headline"]
    assert headline.startswith(
        "needs run-time value(s) for key (hashFiles('weights.sha256') (matches nothing in the "
        "checkout yet)): plan not evaluated"
    )
    assert "key or manifest" in headline  # what the real run would need, said once
    # a literal that is bad on its own cannot hide behind an expression elsewhere in its step
    assert setup["verdict"] == "bad-input", setup
    assert "'lots': expected a number" in setup["plans"][0]["headline"]
    assert proc.returncode == 2


def test_job_filter_and_errors(tmp_path):
    wf = one_job(tmp_path, "- run: echo hi")
    proc = dry_run(tmp_path, wf)
    assert proc.returncode == 0
    assert "no gpu-ci steps found" in proc.stdout
    write(tmp_path, "jobs: [unclosed\n", "bad.yml")
    write(tmp_path, "stages: [test]\ntrain:\n  script: [gpuci gpu-setup]\n", ".gitlab-ci.yml")
    write(tmp_path, "jobs: {}\n", f"{WORKFLOWS}/train.yml")
    for args, expected in (
        ([str(wf), "--job", "nope"], ["job 'nope' not in", "use one of: j"]),
        (["bad.yml"], ["not valid YAML at line"]),
        ([".gitlab-ci.yml"], ["for GitLab CI, run the job with GPUCI_DRY_RUN=true"]),
        (["missing.yml"], ["not found"]),
        (["nope.yml"], ["here: .github/workflows/train.yml"]),  # the hint names what is here
        ([".github"], ["workflow file .github is a folder"]),
    ):
        proc = run_cli_here("dry-run", *args, cwd=tmp_path)
        assert proc.returncode == 2, args
        assert all(text in proc.stdout for text in expected), (args, proc.stdout)
        assert "Traceback" not in proc.stdout + proc.stderr


def test_a_workflow_is_read_bounded_as_its_actions_are(tmp_path):
    """A PR writes the workflow: one over 1 MiB is refused, not read whole and parsed."""
    wf = write(tmp_path, "on: push\njobs: {a: {runs-on: x, steps: [{run: echo hi}]}}\n")
    wf.write_text(wf.read_text() + "#" * (1 << 20) + "\n")
    proc = dry_run(tmp_path, wf)
    assert proc.returncode == 2, proc.stdout
    assert f"workflow {wf} is not usable: it is over 1 MiB" in proc.stdout


def test_the_readme_main_job_passes_on_a_gpu_less_machine(tmp_path):
    """The README's first command: the local dry run of the example workflow."""
    # HOME in tmp_path: an empty embedded store, so the cache would miss
    proc = dry_run(tmp_path, "examples/workflows/train.yml")  # in the repository
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plan is valid" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    body = plan(tmp_path, "examples/workflows/train.yml")
    verdicts = {s["command"]: s["verdict"] for s in body["report"]["steps"] if s["command"]}
    assert verdicts["gpu-setup"] == "would-fail"  # no GPU here: reported, not fatal
    # the runner would skip what follows a failed step: so does the plan, judging it anyway
    smoke = next(s for s in body["report"]["steps"] if s["command"] == "gpu-smoke")
    assert (smoke["verdict"], smoke["planned"]) == ("skipped", "would-fail")
    assert "would fail on this machine (train step 2;" in body["headline"]
    assert "skipped after that, and would fail here too: train step 4" in body["headline"]
    assert body["outputs"]["not-evaluated"] == "0"


def test_dispatching_action_picks_the_sub_command(tmp_path):
    wf = one_job(
        tmp_path,
        """
              - uses: acme/gpu-ci/actions/gpu-pod@v1
                with:
                  action: explode
              - uses: acme/gpu-ci/actions/gpu-pod@v1
                with:
                  action: reap
    """,
    )
    proc = dry_run(tmp_path, wf, "--json")
    assert proc.returncode == 2
    steps = steps_of(proc)
    assert steps[0]["verdict"] == "bad-input"
    assert "input 'action' is 'explode', not one of: up, ls" in steps[0]["detail"]
    assert steps[1]["command"] == "pods reap"
    assert (steps[1]["verdict"], steps[1]["planned"]) == ("skipped", "ok")  # after step 1 fails


@pytest.mark.parametrize(
    "workflow", sorted(p.name for p in (REPO / "examples" / "workflows").glob("*.yml"))
)
def test_every_example_workflow_has_a_valid_plan(workflow, tmp_path):
    proc = dry_run(tmp_path, f"examples/workflows/{workflow}")  # in the repository
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plan is valid" in proc.stdout


def test_each_matrix_leg_is_judged_on_its_own(tmp_path):
    """Legs 40 and 200 on an H200: the 200 leg fails, as it does under act."""
    legs = "{mem: [40, 200], exclude: [{mem: 40}], include: [{mem: 40}, {mem: 100, extra: x}]}"
    wf = matrix_job(tmp_path, legs, "{min-memory-gb: '${{ matrix.mem }}'}")
    steps = plan_steps(tmp_path, wf, GPUCI_FAKE_NVML="h200")
    verdicts = {s["job"]: s["verdict"] for s in steps}
    assert verdicts == {
        "train (mem=200)": "would-fail",
        "train (mem=40)": "ok",
        "train (mem=100)": "ok",  # named by the keys that tell the legs apart
    }
    assert all(not s["unresolved"] for s in steps)


def test_a_matrix_built_at_run_time_is_judged_once_unresolved(tmp_path):
    legs = "${{ fromJSON(vars.LEGS) }}"
    wf = matrix_job(tmp_path, legs, "{min-memory-gb: '${{ matrix.mem }}'}")
    proc = dry_run(tmp_path, wf, "--json")
    (step,) = steps_of(proc)
    assert step["unresolved"] == ["min-memory-gb"]
    assert "built at run time" in proc.stderr + proc.stdout


def test_a_save_whose_path_only_a_conditional_step_makes_may_fail(tmp_path):
    """The first train-gated example: 'weights' was made only by a conditional fetch."""
    wf = one_job(
        tmp_path,
        """
        - id: data
          uses: acme/gpu-ci/actions/cache-weights@v1
          with:
            key: k
            path: |
              data
              weights
        - if: steps.data.outputs.cache-hit != 'true' && vars.URL != ''
          uses: acme/gpu-ci/actions/retry-fetch@v1
          with:
            url: ${{ vars.URL }}
            dest: weights/base.npz
        - if: steps.data.outputs.cache-hit != 'true'
          run: python make.py --out data/tiny.npz
        - name: Save
          if: steps.data.outputs.cache-hit != 'true'
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k
            path: |
              data
              weights
        - run: mkdir -p out && echo 1 > out/m.json
        - name: Save out
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k2
            path: out
        - name: Save nothing
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k3
            path: never-made
    """,
    )
    body = plan(tmp_path, wf, cwd=tmp_path, GPUCI_STORE=(tmp_path / "store").as_uri())
    by_name = {s["name"]: s for s in body["report"]["steps"]}
    save = by_name["Save"]
    assert save["verdict"] == "may-fail"
    assert save["warnings"] == [
        "path 'weights' may be missing: only conditional steps make it: step 2 "
        "(if: steps.data.outputs.cache-hit != 'true' && vars.URL != '')"
    ]
    assert by_name["Save out"]["verdict"] == "ok"
    assert by_name["Save nothing"]["warnings"] == [
        "path 'never-made' may be missing: no step before this one makes it"
    ]
    assert body["outputs"]["may-fail"] == "2"


def test_home_and_absolute_save_paths_count_in_the_may_fail_rule(tmp_path):
    """As a relative path: a save of ~/... or /... that no step makes may fail (act failed
    peft's save of ~/.cache/huggingface/hub); this machine having the folder proves nothing."""
    (tmp_path / ".cache" / "hub").mkdir(parents=True)  # here, not on the runner
    wf = one_job(
        tmp_path,
        """
        - name: Save the hub
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k1
            path: ~/.cache/hub
        - name: Save tmp
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k2
            path: /tmp/gpuci-never-made-x
        - run: mkdir -p "$HOME/.cache/made" /tmp/gpuci-made-y
        - run: python -m pytest tests/
          env:
            HF_HOME: $HOME/.cache/huggingface
        - name: Save what a step made
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k4
            path: ~/.cache/huggingface/hub
        - name: Save what two steps made
          uses: acme/gpu-ci/actions/cache-weights/save@v1
          with:
            key: k3
            path: |
              ~/.cache/made
              /tmp/gpuci-made-y
    """,
    )
    steps = plan_steps(tmp_path, wf, GPUCI_STORE=(tmp_path / "store").as_uri())
    by_name = {s["name"]: s for s in steps}
    assert by_name["Save the hub"]["verdict"] == "may-fail"
    assert by_name["Save the hub"]["warnings"] == [
        "path '~/.cache/hub' may be missing: no step before this one makes it"
    ]
    assert by_name["Save tmp"]["verdict"] == "may-fail"
    assert by_name["Save what a step made"]["verdict"] == "ok"  # a download into HF_HOME
    assert by_name["Save what two steps made"]["verdict"] == "ok"


def test_examples_have_no_path_that_may_be_missing(tmp_path):
    for wf in sorted((REPO / "examples" / "workflows").glob("*.yml")):
        risky = [s for s in plan_steps(tmp_path, wf, GPUCI_FAKE_NVML="h200") if s["warnings"]]
        assert risky == [], wf


def test_a_secret_in_env_is_provided_at_run_time_not_bad_input(tmp_path):
    wf = write(
        tmp_path,
        """
        on: workflow_dispatch
        env:
          RUNPOD_API_KEY: ${{ secrets.RUNPOD_API_KEY }}
        jobs:
          pods:
            runs-on: ubuntu-latest
            steps:
              - name: List
                uses: acme/gpu-ci/actions/gpu-pod@v1
                with:
                  action: ls
        """,
    )
    # The API URL points nowhere: a dry run without a key must not call it at all.
    (step,) = plan_steps(tmp_path, wf, RUNPOD_API_URL="http://127.0.0.1:9")
    assert step["verdict"] == "ok"
    assert step["unresolved"] == ["env RUNPOD_API_KEY"]


def test_env_github_and_runner_values_are_put_in(tmp_path):
    """``${{ env.HF_HOME }}/hub`` (a literal in the workflow's env) is evaluated, not skipped."""
    wf = write(
        tmp_path,
        """
        on: push
        env:
          HF_HOME: /data/hf
          KEY: wf
        jobs:
          j:
            runs-on: x
            env:
              KEY: job-${{ github.ref_name }}
            steps:
              - id: w
                env:
                  KEY: ${{ env.KEY }}-${{ runner.os }}
                uses: acme/gpu-ci/actions/cache-weights@v1
                with:
                  key: ${{ env.KEY }}
                  path: ${{ env.HF_HOME }}/hub
              - uses: acme/gpu-ci/actions/cache-weights@v1
                with:
                  key: w-${{ github.sha }}
                  path: ${{ runner.temp }}/w
        """,
    )
    store = (tmp_path / "store").as_uri()
    first, second = plan_steps(tmp_path, wf, "--ref", "dev", GPUCI_STORE=store)
    assert first["verdict"] == "ok" and first["unresolved"] == []
    assert "no cache for job-dev-Linux" in first["plans"][0]["headline"]  # step env over job's
    # this checkout's commit is github.sha
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert second["verdict"] == "ok", second
    assert f"no cache for w-{sha.stdout.strip()}" in second["plans"][0]["headline"]


def test_what_only_the_run_knows_is_not_evaluated_never_ok(tmp_path):
    wf = one_job(
        tmp_path,
        """
        - uses: acme/gpu-ci/actions/retry-fetch@v1
          with:
            url: ${{ vars.MODEL_URL }}
            dest: m.bin
        - if: vars.GO == 'yes'
          uses: acme/gpu-ci/actions/gpu-setup@v1
          with:
            min-memory-gb: 10
        - if: false
          uses: acme/gpu-ci/actions/gpu-setup@v1
          with:
            min-memory-gb: 999
        """,
    )
    out = plan(tmp_path, wf)
    fetch, maybe, never = out["report"]["steps"]
    assert fetch["verdict"] == "not-evaluated"
    assert fetch["why"] == {"url": "vars.MODEL_URL"}
    assert maybe["verdict"] == "conditional" and maybe["condition"] == "vars.GO == 'yes'"
    assert never["verdict"] == "skipped" and never["plans"] == []  # never judged
    assert out["outputs"]["not-evaluated"] == "1" and out["outputs"]["evaluated"] == "0"
    assert "0 evaluated, 1 not evaluated, 1 conditional, 1 skipped" in out["headline"]
    text = dry_run(tmp_path, wf).stdout
    assert (
        "[not evaluated]\n    unresolved at plan time (set at run time): url (vars.MODEL_URL)"
        in text
    )
    assert "retry-fetch: needs run-time value(s) for url (vars.MODEL_URL)" in text


def test_event_and_ref_decide_conditions(tmp_path):
    wf = one_job(
        tmp_path,
        """
        - name: push only
          if: github.event_name == 'push' && github.ref == 'refs/heads/main'
          uses: acme/gpu-ci/actions/gpu-setup@v1
          with:
            min-memory-gb: 10
        """,
    )
    (step,) = plan_steps(tmp_path, wf)
    assert step["verdict"] == "would-fail"  # runs on a push to main (no GPU here)
    (step,) = plan_steps(tmp_path, wf, "--ref", "feature")
    assert step["verdict"] == "skipped"
    assert step["detail"] == (  # the values the condition read, too
        "skipped (if: github.event_name == 'push' && github.ref == 'refs/heads/main'; "
        "github.event_name is 'push'; github.ref is 'refs/heads/feature')"
    )
    (step,) = plan_steps(tmp_path, wf, "--event", "pull_request")
    assert step["verdict"] == "skipped"


def test_containers_services_and_remote_reusable_workflows_are_named(tmp_path):
    wf = write(
        tmp_path,
        """
        on: push
        jobs:
          train:
            runs-on: gpu-large
            container:
              image: nvcr.io/nvidia/pytorch:24.05-py3
            services:
              db: postgres:16
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
          shared:
            uses: octo/ml/.github/workflows/train.yml@v2
        """,
    )
    setup, remote = plan_steps(tmp_path, wf)
    assert setup["notes"] == [
        "runs in container nvcr.io/nvidia/pytorch:24.05-py3: needs Docker on the runner",
        "service db runs container postgres:16: needs Docker on the runner",
    ]
    assert remote["verdict"] == "not-inspected"
    assert remote["detail"] == "not inspected: remote reusable workflow"
    text = dry_run(tmp_path, wf).stdout
    assert "runs in container nvcr.io/nvidia/pytorch:24.05-py3: needs Docker" in text


def test_a_local_composite_action_is_planned_with_its_inputs(tmp_path):
    """``uses: ./.github/actions/prep`` wrapping gpu-setup: judged, not waved through."""
    write(
        tmp_path,
        """
        inputs:
          mem: {default: "10"}
        runs:
          using: composite
          steps:
            - uses: acme/gpu-ci/actions/gpu-setup@v1
              with:
                min-memory-gb: ${{ inputs.mem }}
        """,
        ".github/actions/prep/action.yml",
    )
    steps = "- uses: actions/checkout@v4\n- uses: ./.github/actions/prep\n  with: {mem: 999}"
    wf = one_job(tmp_path, steps, f"{WORKFLOWS}/w.yml")
    body = plan(tmp_path, wf, GPUCI_FAKE_NVML="h200")
    _, composite, inner = body["report"]["steps"]
    assert composite["verdict"] == "would-fail"
    assert (inner["index"], inner["verdict"]) == ("2.1", "would-fail")
    assert "'NVIDIA H200' has" in inner["plans"][0]["headline"]
    assert body["outputs"]["would-fail"] == "1"  # the inner step, once
    assert composite["warnings"] == []
    # without a checkout before it, the runner cannot find the action
    one_job(tmp_path, "- uses: ./.github/actions/prep\n  with: {mem: 10}", f"{WORKFLOWS}/w.yml")
    composite, inner = plan_steps(tmp_path, wf, GPUCI_FAKE_NVML="h200")
    assert inner["verdict"] == "ok" and composite["verdict"] == "may-fail"
    assert composite["warnings"] == [
        "no step before it checks the repository out (actions/checkout): the runner will not "
        "find ./.github/actions/prep"
    ]


def test_no_network_without_probe(tmp_path):
    """A download, an S3 store and the RunPod API all point at a server that counts
    connections: a plan without --probe makes none; with --probe it may ask (read-only)."""
    with CountingServer() as server:
        wf = one_job(
            tmp_path,
            f"""
            - uses: acme/gpu-ci/actions/retry-fetch@v1
              with:
                url: {server.url}/model.bin
                sha256: {"a" * 64}
            - uses: acme/gpu-ci/actions/cache-weights@v1
              with:
                key: k
                path: w
                store: s3://bucket/prefix
                endpoint-url: {server.url}
            - uses: acme/gpu-ci/actions/gpu-pod@v1
              with:
                action: ls
            """,
        )
        env = clean_env(
            HOME=str(tmp_path),
            RUNPOD_API_KEY="rk_test_key",
            RUNPOD_API_URL=server.url,
            AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
            AWS_SECRET_ACCESS_KEY="secretsecret",
            AWS_EC2_METADATA_DISABLED="true",
        )
        proc = run_cli_here("dry-run", str(wf), "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert server.connections == 0
        fetch, restore, pods = steps_of(proc)
        assert "fetch, write " in fetch["plans"][0]["report"]["plan"][0]["would"]
        assert restore["verdict"] == "not-evaluated"
        assert "s3://bucket/prefix is on the network" in restore["detail"]
        assert pods["verdict"] == "ok" and "RunPod not asked" in pods["notes"][-1]
        out = json.loads(proc.stdout)
        assert out["report"]["probe"] is False and "no network used" in out["headline"]
        # the same plan from the command line of each step: no connection either
        for args in (
            ["retry-fetch", "--url", f"{server.url}/m.bin", "--dry-run"],
            ["pods", "ls", "--dry-run"],
        ):
            done = run_cli_here(*args, env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stdout + done.stderr
        assert server.connections == 0
        proc = run_cli_here("dry-run", str(wf), "--json", "--probe", env=env, cwd=tmp_path)
        assert "Traceback" not in proc.stdout + proc.stderr
        assert server.connections > 0
        assert json.loads(proc.stdout)["report"]["probe"] is True


def test_job_conditions_needs_and_the_job_filter(tmp_path):
    wf = write(
        tmp_path,
        """
        on: [push, schedule]
        jobs:
          first:
            runs-on: x
            steps: [{run: echo hi}]
          gpu:
            needs: first
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with: {require-gpu: false}
          nightly:
            if: github.event.schedule == '0 3 * * *'
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with: {require-gpu: false}
          labelled:
            if: contains(github.event.pull_request.labels.*.name, 'gpu') || vars.FORCE == 'yes'
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with: {require-gpu: false}
        """,
    )
    by_job = {s["job"]: s for s in plan_steps(tmp_path, wf)}
    assert by_job["gpu"]["verdict"] == "ok"
    assert by_job["nightly"]["verdict"] == "skipped"  # a push has no schedule
    assert by_job["labelled"]["verdict"] == "conditional"  # the job's if: waits for the run
    assert by_job["labelled"]["planned"] == "ok"
    # --job gpu: `first` is outside the plan, so gpu is planned as if it had passed
    (only,) = plan_steps(tmp_path, wf, "--job", "gpu")
    assert only["verdict"] == "ok"
    by_job = {s["job"]: s for s in plan_steps(tmp_path, wf, "--event", "schedule")}
    assert by_job["nightly"]["verdict"] == "conditional"  # which cron fired is the run's


def test_hash_files_is_computed_from_the_checkout_as_the_runner_does(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.lock").write_bytes(b"one")
    (tmp_path / "a" / "y.lock").write_bytes(b"two")
    ctx = {"github": {"workspace": str(tmp_path)}}
    assert hash_files(ctx, ["a/x.lock"]) == runner_hash_files(b"one")
    assert hash_files(ctx, ["**/*.lock"]) == runner_hash_files(b"one", b"two")
    assert hash_files(ctx, ["**/*.lock", "!a/y.lock"]) == runner_hash_files(b"one")
    assert hash_files(ctx, ["a/x.lock\na/y.lock"]) == runner_hash_files(b"one", b"two")
    for left in (["none.lock"], ["../x"], ["/etc/passwd"], [Unknown("vars.F")]):
        assert isinstance(hash_files(ctx, left), Unknown), left


def test_a_job_after_a_failed_need_is_skipped_and_so_is_what_needs_it(tmp_path):
    wf = write(
        tmp_path,
        """
        on: push
        jobs:
          a:
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with: {min-memory-gb: 999}
          b:
            needs: a
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
          c:
            needs: b
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
          d:
            needs: b
            if: always()
            runs-on: x
            steps:
              - uses: acme/gpu-ci/actions/gpu-setup@v1
                with: {min-memory-gb: 10}
        """,
    )
    by_job = {s["job"]: s["verdict"] for s in plan_steps(tmp_path, wf, GPUCI_FAKE_NVML="h200")}
    assert by_job == {"a": "would-fail", "b": "skipped", "c": "skipped", "d": "ok"}


def test_a_plan_that_would_read_a_store_on_the_network_names_it():
    ledger = network_needed("pods up", {"ledger": "s3://b/team"}, {})
    assert ledger == "the pods ledger s3://b/team is on the network; --probe lets the plan read it"
    assert network_needed("pods up", {"ledger": "file:///tmp/l"}, {}) == ""
    store = network_needed("cache-weights restore", {}, {"GPUCI_STORE": "s3://b/p"})
    assert store == "the store s3://b/p is on the network; --probe lets the plan look the key up"
    assert network_needed("gpu-setup", {"store": "s3://b/p"}, {}) == ""
