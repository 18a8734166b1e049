"""``dry-run`` on real projects' GPU workflows, adapted the way the README says.

Each fixture under ``fixtures/<project>/`` is a checkout of its own (its workflows under
``.github/workflows``), adapted from the file its header names (repository, path, commit): the
project's own ``if:``, ``env``, matrices, containers and reusable workflows kept, gpu-ci steps
added. The verdicts asserted are what the runner (and act) does with them on a machine like the
one the test fakes (``GPUCI_FAKE_NVML``), step by step and leg by leg.
"""

from __future__ import annotations

import json
from pathlib import Path

from dryrun.dryrun_testing import WORKFLOWS, plan, runner_hash_files
from gpuci.dryrun import classify_uses

FIXTURES = Path(__file__).parent / "fixtures"
AXOLOTL = {"full_name": "axolotl-ai-cloud/axolotl"}  # the payload's repository


def project_plan(project: str, workflow: str, tmp_path: Path, gpus: str, *args: str) -> dict:
    """The JSON result of ``dry-run`` of the project's workflow, run in its checkout."""
    wf = f"{WORKFLOWS}/{workflow}"
    return plan(tmp_path, wf, *args, cwd=FIXTURES / project, GPUCI_FAKE_NVML=gpus)


def verdicts(body: dict) -> dict[tuple[str, str], str]:
    """(job, step) -> verdict of each gpu-ci step; a skipped or conditional one with what it
    would be if it ran (``skipped/ok``)."""
    found = {}
    for step in body["report"]["steps"]:
        if classify_uses(step["uses"]) is None:
            continue
        verdict = step["verdict"]
        if step["planned"]:
            verdict += f"/{step['planned']}"
        found[(step["job"], str(step["index"]))] = verdict
    return found


def test_peft_nightly_each_container_job_and_the_save_of_the_hub_cache(tmp_path):
    """The save of ~/.cache/huggingface/hub, which no step makes, may fail (act failed it)."""
    body = project_plan("peft", "nightly.yml", tmp_path, "h200,h200")
    expected = {}
    for job in ("run_all_tests_single_gpu", "run_all_tests_multi_gpu"):
        expected |= {(job, "2"): "ok", (job, "3"): "ok", (job, "5"): "ok", (job, "7"): "may-fail"}
    assert verdicts(body) == expected
    save = next(s for s in body["report"]["steps"] if s["name"] == "Save the hub cache")
    assert save["warnings"] == [
        "path '~/.cache/huggingface/hub' may be missing: no step before this one makes it"
    ]
    assert "runs in container huggingface/peft-gpu:latest" in save["notes"][0]
    assert body["report"]["notes"] == []  # it runs on workflow_dispatch, the event planned


def test_peft_nightly_planned_for_a_push_it_never_runs_on_says_so(tmp_path):
    body = project_plan("peft", "nightly.yml", tmp_path, "h200,h200", "--event", "push")
    (note,) = body["report"]["notes"]
    assert "does not run on push (it runs on: workflow_dispatch, schedule)" in note
    assert any(note in a["message"] for a in body["annotations"])


def test_diffusers_pr_gpu_tests_wait_for_vars_and_secrets_until_given(tmp_path):
    body = project_plan("diffusers", "pr_tests_gpu.yml", tmp_path, "t4")
    expected = {
        ("torch_pipelines_cuda_tests", "2"): "ok",
        ("torch_pipelines_cuda_tests", "3"): "not-evaluated",  # its key needs matrix.module
    }
    for module in ("models", "schedulers", "lora", "others"):
        job = f"torch_cuda_tests (module={module})"
        expected |= {
            (job, "2"): "ok",
            (job, "3"): "ok",
            (job, "4"): "not-evaluated",  # vars.HF_MIRROR || 'https://huggingface.co'
            (job, "5"): "conditional/ok",  # if: env.HF_READ_TOKEN != '' (a secret)
        }
    assert verdicts(body) == expected

    given = project_plan(
        "diffusers", "pr_tests_gpu.yml", tmp_path, "t4",
        "--var", "HF_MIRROR=https://hf-mirror.example",
        "--secret", "DIFFUSERS_HF_HUB_READ_TOKEN",
    )  # fmt: skip
    for module in ("models", "schedulers", "lora", "others"):
        job = f"torch_cuda_tests (module={module})"
        assert (verdicts(given)[(job, "4")], verdicts(given)[(job, "5")]) == ("ok", "ok")
    fetch = next(s for s in given["report"]["steps"] if s["name"].startswith("Fetch the tiny"))
    assert "https://hf-mirror.example/hf-internal-testing/" in json.dumps(fetch["plans"])

    # variables from a dotenv file; the secret not named is empty, so the smoke step is skipped
    (tmp_path / "vars.env").write_text("# mirror\nHF_MIRROR='https://hf-mirror.example'\n")
    other = project_plan(
        "diffusers", "pr_tests_gpu.yml", tmp_path, "t4",
        "--vars-file", str(tmp_path / "vars.env"), "--secret", "SOME_OTHER_TOKEN",
    )  # fmt: skip
    assert verdicts(other)[("torch_cuda_tests (module=lora)", "4")] == "ok"
    assert verdicts(other)[("torch_cuda_tests (module=lora)", "5")] == "skipped"


def test_ao_regression_legs_through_a_local_reusable_workflow(tmp_path):
    """Each leg calls _linux_job.yml with its own inputs: the CUDA legs run gpu-setup (it fails
    on a driver older than CUDA 12.6, as act's did), the CPU legs skip it; keys per leg."""
    body = project_plan("ao", "regression_test.yml", tmp_path, "h200")
    expected = {}
    for cuda, cpu in (("test-nightly (name=CUDA Nightly)", "test-nightly (name=CPU Nightly)"),
                      ("test (name=CUDA 2.7)", "test (name=CPU 2.7)")):  # fmt: skip
        expected |= {
            (f"{cuda}/build", "2"): "would-fail",
            (f"{cuda}/build", "3"): "skipped/ok",
            (f"{cuda}/build", "5"): "skipped/ok",
            (f"{cuda}/build", "6"): "skipped/may-fail",
            (f"{cpu}/build", "2"): "skipped",  # if: inputs.gpu-arch-type == 'cuda'
            (f"{cpu}/build", "3"): "ok",
            (f"{cpu}/build", "5"): "skipped",
            (f"{cpu}/build", "6"): "may-fail",
        }
    assert verdicts(body) == expected
    digest = runner_hash_files((FIXTURES / "ao" / "dev-requirements.txt").read_bytes())
    keys = {
        s["job"]: s["plans"][0]["report"].get("key") or s["plans"][0]["headline"]
        for s in body["report"]["steps"]
        if s["name"] == "Restore the hub cache"
    }
    assert f"ao-hf-cpu-{digest}" in keys["test (name=CPU 2.7)/build"]
    assert f"ao-hf-cuda-{digest}" in keys["test (name=CUDA 2.7)/build"]
    setup = next(s for s in body["report"]["steps"] if s["job"] == "test (name=CUDA 2.7)/build")
    text = "\n".join(body["report"]["plan"])
    assert "Check the GPU for CUDA 12.6" in text and "${{" not in text
    assert "== job test (name=CPU 2.7)/build: build (cpu ) (runs-on: linux.4xlarge)" in text
    assert setup["index"] == 1  # the checkout: the called job's own steps, not the caller's


def test_axolotl_draft_gates_needs_outputs_and_the_e2e_matrix(tmp_path):
    """On a push the draft gates read null and hold; the first e2e job reads the gate's output
    through a need it does not declare (null: it runs); the rest wait for that output."""
    payload = tmp_path / "push.json"
    payload.write_text(json.dumps({"repository": AXOLOTL}))
    body = project_plan("axolotl", "tests.yml", tmp_path, "h200", "--event-payload", str(payload))
    expected = {}
    for torch in ("2.8.0", "2.9.1"):
        expected |= {(f"pytest (pytorch_version={torch})", "2"): "ok"}
        expected |= {(f"pytest (pytorch_version={torch})", "6"): "ok"}  # mkdir -p makes it
    first = "docker-e2e-tests-1st (cuda=128, cuda_version=12.8.1, python_version=3.11, "
    first += "pytorch=2.8.0, num_gpus=1, dockerfile=Dockerfile-uv.jinja)"
    expected |= {(first, "2"): "ok", (first, "3"): "ok"}
    for leg in ("cuda=128, pytorch=2.8.0", "cuda=128, pytorch=2.9.1", "cuda=130, pytorch=2.9.1"):
        job = f"docker-e2e-tests ({leg})"
        expected |= {(job, "2"): "conditional/ok", (job, "3"): "conditional/ok"}
    assert verdicts(body) == expected
    text = "\n".join(body["report"]["plan"])
    assert "needs.gate-skip-e2e.outputs.skip is known at run time" in text
    assert "=None" not in text and "axolotl_extras=," not in text


def test_axolotl_on_a_draft_pull_request_skips_every_gpu_step(tmp_path):
    payload = tmp_path / "pr.json"
    draft = {"draft": True, "labels": [{"name": "gpu"}]}
    payload.write_text(json.dumps({"pull_request": draft, "repository": AXOLOTL}))
    body = project_plan(
        "axolotl", "tests.yml", tmp_path, "h200",
        "--event", "pull_request", "--event-payload", str(payload),
    )  # fmt: skip
    assert set(verdicts(body).values()) == {"skipped"}
    assert body["outputs"]["skipped"] == str(len(verdicts(body)))
