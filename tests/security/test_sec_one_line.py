"""Bad input and lying servers get one line and exit 2 or 3, never "internal error".

(The GitHub API's wrong shapes are in test_sec_github.py.)
"""

from __future__ import annotations

import pytest

from gpuci_testing import clean_env, run_cli_here


def one_line(proc, code: int) -> None:
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, text
    assert "internal error" not in text and "Traceback" not in text
    assert "gpu-ci bug" not in text


def test_dry_run_of_a_file_that_is_not_utf8(tmp_path):
    workflow = tmp_path / "w.yml"
    workflow.write_bytes(b"jobs:\n  a:\n    steps:\n      - name: \xff\xfe\n")
    proc = run_cli_here("dry-run", str(workflow))
    one_line(proc, 2)
    assert "not UTF-8" in proc.stdout


@pytest.mark.parametrize("ttl", ["99999999999999w", "9" * 400])
def test_a_ttl_past_every_clock(ttl):
    proc = run_cli_here(
        "pods",
        "up",
        "--dry-run",
        "--gpu-types",
        "x",
        "--image",
        "y",
        "--ttl",
        ttl,
        env=clean_env(USER="t"),
    )
    one_line(proc, 2)
    assert "'ttl'" in proc.stdout


@pytest.mark.parametrize(
    "body",
    [
        [],  # a list where {"pods": [...]} belongs
        {"pods": {"id": "p1"}},
        {"pods": [{"id": 5}]},
        {"pods": [{"id": "p1", "gpu": "H100", "name": "gpuci owner=a"}]},
        {"pods": [{"id": "p1", "cost": "a lot"}]},
        {"pods": [{"id": "p1", "env": {"GPUCI_OWNER": ["a"]}}]},
        b"<html>not json</html>",
    ],
)
def test_runpod_answers_of_the_wrong_shape(runpod, body):
    url = runpod(200, body)
    proc = run_cli_here("pods", "ls", env=clean_env(RUNPOD_API_KEY="k" * 24, RUNPOD_API_URL=url))
    one_line(proc, 3)
    assert "RunPod API answered" in proc.stdout


@pytest.mark.parametrize(
    ("command", "body"),
    [
        (["cost"], {"records": "none"}),
        (["cost"], {"records": [{"podId": "p1", "totalAmount": "a lot"}]}),
        (["start", "--pod-id", "p1"], {"id": "p1", "env": "GPUCI_OWNER=a"}),
    ],
)
def test_more_runpod_shapes(runpod, command, body):
    url = runpod(200, body)
    env = clean_env(RUNPOD_API_KEY="k" * 24, RUNPOD_API_URL=url, USER="t")
    proc = run_cli_here("pods", *command, env=env)
    one_line(proc, 3)
