"""The RunPod key never reaches stdout, stderr or the report, even when the server echoes it."""

from __future__ import annotations

import pytest
from pods_testing import api_env

from gpuci_testing import clean_env, run_cli


def _cli(fake, tmp_path, *args: str, key: str | None = None, **extra: str):
    env = clean_env(**api_env(fake, tmp_path, RUNPOD_API_KEY=key or fake.api_key, **extra))
    return run_cli("pods", *args, env=env, timeout=60)


@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "terminal"])
def test_a_refused_key_echoed_back_is_still_masked(live, tmp_path, mode):
    wrong = "rpa_WRONGKEY0123456789abcdef"
    proc = _cli(live, tmp_path, "ls", *mode, key=wrong)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert live.requests[0].auth == f"Bearer {wrong}"  # it was sent, and echoed in the 401
    assert "invalid key" in proc.stdout
    assert wrong not in proc.stdout + proc.stderr and "***" in proc.stdout


def test_a_full_up_and_down_never_prints_the_key(live, tmp_path):
    up = _cli(
        live,
        tmp_path,
        "up",
        "--json",
        "--gpu-types",
        "NVIDIA L40S",
        "--image",
        "img",
        "--command",
        "serve",
        "--ports",
        "8000/http",
        "--ttl",
        "10m",
    )
    assert up.returncode == 0, up.stdout + up.stderr
    pod_id = next(iter(live.pods))
    down = _cli(live, tmp_path, "down", "--pod-id", pod_id)
    assert down.returncode == 0, down.stdout
    for proc in (up, down):
        assert live.api_key not in proc.stdout + proc.stderr
    ledger = (tmp_path / "j.jsonl").read_text() + "".join(
        p.read_text() for p in (tmp_path / "ledger").rglob("*.json")
    )
    assert '"created"' in ledger and '"terminated"' in ledger
    assert live.api_key not in ledger
    assert live.api_key not in str(live.calls("POST", "/v2/pods")[0].body)  # not in the pod env


def test_github_mode_registers_the_mask_before_any_request(live, tmp_path):
    out = tmp_path / "out"
    proc = _cli(
        live,
        tmp_path,
        "ls",
        GITHUB_ACTIONS="true",
        GITHUB_OUTPUT=str(out),
        GITHUB_STEP_SUMMARY=str(tmp_path / "sum"),
    )
    assert proc.returncode == 0, proc.stdout
    first = proc.stderr.splitlines()[0]  # the log stream, which the runner parses too
    assert first == f"::add-mask::{live.api_key}"
    assert proc.stderr.count(live.api_key) == 1
    assert live.api_key not in proc.stdout
