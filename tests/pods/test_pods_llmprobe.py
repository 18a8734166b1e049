"""The vLLM matrix examples' probe and table, against a fake OpenAI-compatible server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuci import safe_start
from gpuci.pods.health import llmprobe
from gpuci_testing import clean_env
from loopback_http import JsonAPIHandler, LoopbackHTTPServer
from security.hostile_http import HostileServer, trickled_body, trickled_headers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def vllm():
    seen: list[dict[str, Any]] = []

    class Handler(JsonAPIHandler):
        def do_GET(self) -> None:
            self._reply(200, {"data": [{"id": "Qwen/Qwen2.5-0.5B-Instruct"}]})

        def do_POST(self) -> None:
            seen.append(self._body())
            self._reply(200, {"choices": [{"text": " Paris."}], "usage": {"completion_tokens": 3}})

    with LoopbackHTTPServer(Handler) as server:
        yield f"http://127.0.0.1:{server.port}", seen


def test_probe_then_table_per_gpu_type(vllm, tmp_path, monkeypatch):
    url, seen = vllm
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    for gpu, rate in (("NVIDIA L40S", "0.86"), ("NVIDIA GeForce RTX 4090", "0.44")):
        out = tmp_path / f"{gpu}.json"
        args = ["probe", "--url", url, "--model", model, "--gpu", gpu, "--cost-per-hr", rate]
        assert llmprobe.main([*args, "--out", str(out)]) == 0
        leg = json.loads(out.read_text())
        assert leg["completion_tokens"] == 3 and leg["tokens_per_s"] > 0 and "error" not in leg
    assert seen[0]["model"] == model and seen[0]["max_tokens"] == 32
    missing = tmp_path / "missing.json"
    args = ["probe", "--url", url, "--model", "other/model", "--gpu", "NVIDIA H100 80GB HBM3"]
    assert llmprobe.main([*args, "--out", str(missing)]) == 1  # the leg fails, visibly
    assert "other/model is not served" in json.loads(missing.read_text())["error"]
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    legs = sorted(str(p) for p in tmp_path.glob("*.json"))
    assert llmprobe.main(["table", *legs]) == 0
    md = summary.read_text()
    assert "| GPU type | USD/h | latency s | tokens/s | USD per 1M tokens | result |" in md
    assert "| NVIDIA L40S | 0.86 |" in md and "| NVIDIA GeForce RTX 4090 | 0.44 |" in md
    assert "other/model is not served" in md


def test_the_matrix_examples_name_the_same_probe():
    gh_text = (REPO / "examples/workflows/vllm-matrix.yml").read_text()
    lab_text = (REPO / "examples/gitlab/vllm-pods.gitlab-ci.yml").read_text()
    gh = yaml.safe_load(gh_text)
    legs = gh["jobs"]["serve"]["strategy"]["matrix"]["gpu"]
    assert len(legs) >= 2 and gh["jobs"]["serve"]["strategy"]["fail-fast"] is False
    matrix = yaml.safe_load(lab_text)["serve"]["parallel"]["matrix"][0]["GPU_TYPE"]
    assert len(matrix) >= 2
    start = f'"$GPUCI_PYTHON" -c "{safe_start.code("gpuci.pods.health.llmprobe")}"'
    for text in (gh_text, lab_text):
        # in the checkout, never `-m`: the PR's own gpuci/ would run (gpuci.safe_start)
        assert f"{start} probe" in text and f"{start} table" in text
        assert "-m gpuci" not in text
        assert ("/v1/models" in text and "pods down --pod-id" in text) or "action: down" in text
    # a leg tears down only its own pod: `down` without an id would end the other legs' pods
    assert "steps.pod.outputs.pod-id != ''" in gh_text
    assert 'if [ -n "$id" ]' in lab_text


def test_an_endless_or_hostile_answer_fails_the_leg_in_one_line(tmp_path):
    """The server's answer is read only up to 1 MiB, whatever it claims, then parsed as
    untrusted JSON: the leg fails with one line, never a traceback or a memory blow-up."""
    pulled = {"bytes": 0}

    class Handler(JsonAPIHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(10**12))
            self.end_headers()
            chunk = b"[" * 65536
            try:
                while pulled["bytes"] < 64 << 20:
                    self.wfile.write(chunk)
                    pulled["bytes"] += len(chunk)
            except OSError:
                pass  # the client stopped reading: what the test wants

    with LoopbackHTTPServer(Handler) as server:
        out = tmp_path / "leg.json"
        url = f"http://127.0.0.1:{server.port}"
        args = ["probe", "--url", url, "--model", "m", "--gpu", "g", "--out", str(out)]
        assert llmprobe.main(args) == 1
    error = json.loads(out.read_text())["error"]
    assert "over the 1 MiB cap" in error and "\n" not in error
    assert pulled["bytes"] < 32 << 20  # stopped soon after the cap, not at the claim
    bad = tmp_path / "bad.json"
    bad.write_text("[" * 100_000)
    table = llmprobe.table([llmprobe._leg(bad)])
    assert "unreadable leg file bad.json" in table


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_trickled_answer_ends_the_probe_at_its_timeout_in_one_line(tmp_path, headers):
    """A byte every 0.2 s passes every per-read timeout: ``--timeout`` bounds the whole
    probe, so the leg fails in one line (and its job goes on to end its pod)."""
    out = tmp_path / "leg.json"
    with HostileServer() as evil:
        evil.route("/v1/models", trickled_headers() if headers else trickled_body())
        args = ["probe", "--url", evil.url(""), "--model", "m", "--gpu", "g", "--timeout", "2"]
        proc = subprocess.run(
            [sys.executable, "-m", "gpuci.pods.health.llmprobe", *args, "--out", str(out)],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == ["probe failed: ReadTimeout: the deadline of 2s passed"]
    assert json.loads(out.read_text())["error"] == "ReadTimeout: the deadline of 2s passed"
