"""An env value a plan hides (every value of the ``env`` input: their secrecy can't be told from
their names) is never printed from RunPod's echo of the request either: a refusal that quotes
the env is redacted, in the log, the JSON report and the journal, like a registered secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fake_runpod
import httpx
import pytest
from pods_testing import FakeClock

from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.errors import ContractViolation, RunPodError
from loopback_http import JsonAPIHandler
from security.hostile_runpod import Serving

VALUE = "hf_S3cr3tV4lu3ThatIsNotNamedLikeOne"
BODY = {"name": "t", "image": "img", "gpu": {"id": "NVIDIA L40S"}, "env": {"HF_HOME": VALUE}}


def _echo(env: dict[str, Any]) -> dict[str, Any]:
    """A problem answer quoting the env it was sent, in its detail and its errors."""
    pairs = ", ".join(f"{k}={v}" for k, v in env.items())
    return {"detail": f"invalid env: {pairs}", "errors": [f"env: {pairs}", {"env": env}]}


def _refusal(status: int, call: str) -> RunPodError:
    """What ``call`` raises when RunPod answers ``status`` quoting the env it was sent."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":  # a create retried looks for its pod first
            return httpx.Response(200, json={"pods": []})
        return httpx.Response(status, json=_echo(json.loads(request.content)["env"]))

    transport = httpx.MockTransport(answer)
    client = RunPodClient("rpa_t", "https://runpod.test", transport=transport, clock=FakeClock())
    with client, pytest.raises(RunPodError) as err:
        if call == "create":
            client.create_pod(BODY)
        else:
            client.update_pod("p1", {"env": BODY["env"]})
    return err.value


@pytest.mark.parametrize(
    "status, call", [(400, "create"), (403, "create"), (500, "create"), (400, "update")]
)
def test_a_refusal_quoting_the_env_never_shows_its_values(status, call):
    err = _refusal(status, call)
    shown = f"{err.one_line()} {err.detail}"
    assert VALUE not in shown and "HF_HOME=***" in shown, shown


def test_a_contract_violation_quoting_the_env_never_shows_its_values():
    """422 prints its list of errors too, one of them an object (shown as Python shows it)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json=_echo(json.loads(request.content)["env"]))

    transport = httpx.MockTransport(answer)
    with (
        RunPodClient("rpa_t", "https://runpod.test", transport=transport) as client,
        pytest.raises(ContractViolation) as err,
    ):
        client.create_pod(BODY)
    assert VALUE not in err.value.one_line() and "***" in err.value.one_line()


class _EchoRunPod(Serving):
    """RunPod's catalog and an empty pod list; every create refused with its env quoted."""

    def __init__(self) -> None:
        class Handler(JsonAPIHandler):
            def do_GET(self) -> None:
                catalog = self.path.startswith("/v2/catalog/gpus")
                self._reply(200, {"gpus": fake_runpod.CATALOG} if catalog else {"pods": []})

            def do_POST(self) -> None:
                self._reply(400, _echo(self._body().get("env") or {}))

        super().__init__(Handler)


@pytest.fixture
def echo() -> Iterator[_EchoRunPod]:
    server = _EchoRunPod()
    yield server
    server.close()


def test_up_refused_with_its_env_quoted_prints_no_env_value(echo, run, tmp_path):
    """The reviewer's case: the plan hid HF_HOME's value, the log printed it from the echo."""
    flags = dict(gpu_types="NVIDIA L40S", image="img", command="x", ttl="10m")
    res = run(
        "up",
        **flags,
        env=f"HF_HOME={VALUE}",
        placement_timeout="1s",
        extra_env={"RUNPOD_API_URL": echo.url},
    )
    assert res.code == 3 and "no candidate placed" in res.json["headline"], res.stdout
    assert "HF_HOME=***" in res.json["headline"]
    journal = (tmp_path / "j.jsonl").read_text() if (tmp_path / "j.jsonl").exists() else ""
    assert VALUE not in res.stdout + res.stderr + journal
