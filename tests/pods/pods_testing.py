"""Plain helpers of the pods tests, imported by name (never ``from conftest import``: that
picks whichever folder's conftest pytest loaded last)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuci.commands import _pods as spec
from gpuci.inputs import build, resolve
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import RunPodClient, RunPodError
from gpuci.pods._runpod.naming import new_tag
from gpuci.runtime import Runtime
from gpuci_testing import clean_env, run_cli_here

SUBS = {c.name: c for c in spec.COMMAND.subcommands}
L40S = "NVIDIA L40S"
#: A GitHub Actions run, id 77: a one-job runner of it is labelled ``run-77``.
RUN_ENV = {"GITHUB_RUN_ID": "77", "GITHUB_SERVER_URL": "https://github.com"}


def call(sub: str, rt: Runtime, clock: Any, **flags: Any) -> Any:
    """``pods SUB`` in process on ``clock``: ``flags`` parsed once, at the edge, as
    run_command parses them; its Result (errors raise)."""
    cmd = SUBS[sub]
    raw = {k.replace("_", "-"): None if v is None else str(v) for k, v in flags.items()}
    values = resolve(cmd.inputs, raw, rt.environ, on_secret=rt.mask)
    typed_cls = cmd.load_options()
    inp = build(typed_cls, values) if typed_cls is not None else values
    return cmd.load()(inp, rt, clock=clock)


def api_env(fake: Any, tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a job gives gpu-ci to reach ``fake``: the key and URL, a quick poll, a ledger and
    journal of its own in ``tmp_path``; ``extra`` adds to these or replaces them."""
    return {
        "RUNPOD_API_KEY": fake.api_key,
        "RUNPOD_API_URL": fake.url,
        "GPUCI_PODS_POLL_S": "0.01",
        "GPUCI_PODS_LEDGER": str(tmp_path / "ledger"),
        "GPUCI_JOURNAL": str(tmp_path / "j.jsonl"),
        "USER": "tester",
        **extra,
    }


def smoke(tmp_path: Path, store: str, nvml: str, **where: str) -> None:
    """gpu-smoke as a pod runs it (``where``: RUNPOD_DC_ID, RUNPOD_POD_ID ...) on fake GPUs
    ``nvml``, recording into the GPU health ``store``, in this process; fails on any verdict
    but the expected one (a failure for an ``ecc`` profile, else a pass)."""
    environ = clean_env(
        GPUCI_JOURNAL=str(tmp_path / "smoke-journal.jsonl"),
        GPUCI_FAKE_NVML=nvml,
        GPUCI_GPU_HEALTH_STORE=store,
        **where,
    )
    proc = run_cli_here("gpu-smoke", "--framework", "none", env=environ, cwd=tmp_path)
    assert proc.returncode == (1 if "ecc" in nvml else 0), proc.stdout + proc.stderr


def up_runner(run: Any, env: dict[str, str], runner: str = "github", **flags: Any) -> Any:
    """``pods up`` (the ``run`` fixture) of an L40S pod with a one-job ``runner`` labelled
    ``run-77``, in ``env``; ``flags`` add inputs or replace these."""
    flags = {"gpu_types": L40S, "runner_labels": "run-77", **flags}
    return run("up", runner=runner, extra_env=env, **flags)


def executable(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (its folders made) as an executable script; the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def tools_only(bin_dir: Path, names: Sequence[str]) -> str:
    """A PATH of ``bin_dir`` holding only these tools (those this machine has): it proves each
    fallback on its own."""
    bin_dir.mkdir()
    for name in names:
        found = shutil.which(name)
        if found:
            os.symlink(found, bin_dir / name)
    return str(bin_dir)


def planned_pod(
    fake: Any, spec: plan.PodSpec, expires_at: float
) -> tuple[str, dict[str, str], str]:
    """The pod ``up`` would create for ``spec`` (alice's, on an L40S), made on ``fake`` at
    once: (its id, its env, its container command)."""
    body = plan.create_body(
        spec, new_tag("alice", "local", expires_at), plan.Candidate(L40S), fake.url
    )
    status, pod = fake.api("POST", "/v2/pods", body)
    assert status == 201, pod
    return pod["id"], body["env"], body["args"]


class FakeClock:
    def __init__(self, start: float = 1_795_000_000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def refused_answer(call: str, answer: Any = None, handler: Any = None) -> RunPodError:
    """What ``call`` raises when RunPod answers ``answer`` (200), or as ``handler`` does."""
    body = json.dumps(answer).encode()
    transport = httpx.MockTransport(handler or (lambda request: httpx.Response(200, content=body)))
    with (
        RunPodClient("rpa_test", "https://runpod.test", transport=transport) as client,
        pytest.raises(RunPodError) as err,
    ):
        {
            "catalog": lambda: client.list_gpu_types(),
            "pods": client.list_pods,
            "pod": lambda: client.get_pod("p1"),
            "billing": lambda: client.pod_billing("a", "b"),
        }[call]()
    return err.value


def ledger_folder(tmp_path: Path, root: str, owner: str = "alice") -> Path:
    """An owner's folder under ``root`` (reservations, releases) of the test's file ledger."""
    from gpuci.pods._budgets import ledger

    return tmp_path / "ledger" / root / ledger.owner_key(owner)


def plant(path: Path, item: object) -> None:
    """Put an object in the ledger as anyone with write access could: JSON, or text as given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(item if isinstance(item, str) else json.dumps(item))


def stopped_pod(run: Any, up: dict[str, str], **flags: Any) -> str:
    """The id of a pod ``up`` made (its inputs and ``flags``) and ``stop`` then stopped."""
    pod = run("up", **{**up, **flags}).outputs["pod-id"]
    assert run("stop", pod_id=pod).code == 0
    return pod


def plant_release(tmp_path: Path, reservation: Path) -> None:
    """A release of the file ledger's ``reservation`` with gpu-ci's own bytes: only where it
    is planted is hostile."""
    from gpuci.pods._budgets import ledger

    key = f"{ledger.RESERVATIONS}/{reservation.parent.name}/{reservation.name}"
    data = json.dumps({"released": key}, sort_keys=True, separators=(",", ":"))
    plant(ledger_folder(tmp_path, ledger.RELEASES) / reservation.name, data)


def counting_gets(monkeypatch: Any, folder: str = "reservations") -> list[int]:
    """A one-item list counting the file store's reads of objects under the ledger's
    ``folder`` (reservations, events) from now on."""
    from gpuci.cache._stores.file import LocalStore

    gets = [0]
    original = LocalStore.get

    def counting(self: Any, key: str, limit: int | None = None) -> Any:
        gets[0] += f"/{folder}/" in key
        return original(self, key, limit)

    monkeypatch.setattr(LocalStore, "get", counting)
    return gets


# ----- the simulated day and month of CI (test_pods_day.py, test_pods_month.py) -----------
# Six 503s in a row: enough that ``pods down`` gives up (the simulations expect exit 3).
_TEARDOWN_FAILURES = [(503, {})] * 6


def up_or_refused(res: Any, stats: MutableMapping[str, int]) -> str | None:
    """Count one ``pods up`` run: refused over budget (exit 1, None) or up (its pod id)."""
    if res.code == 1:
        stats["refused"] += 1
        assert "budget" in res.json["headline"]
        return None
    assert res.code == 0, res.stdout
    stats["up"] += 1
    return res.outputs["pod-id"]


def fail_teardown(fake: Any, pod_id: str, stats: MutableMapping[str, int]) -> None:
    """Make the next ``pods down`` of ``pod_id`` fail: the API answers every DELETE with 503."""
    fake.fail(f"DELETE /v2/pods/{pod_id}", *_TEARDOWN_FAILURES)
    stats["failed_down"] += 1


def serve_scripted(answers: Sequence[bytes]) -> str:
    """A raw server on 127.0.0.1 (port 0) that answers its n-th connection, once the request's
    head is read, with ``answers[n]`` as they are (cut, empty, malformed), then closes it; its
    URL. For answers no well-behaved HTTP server would send."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            for answer in answers:
                conn, _ = listener.accept()
                with conn:
                    asked = b""
                    while b"\r\n\r\n" not in asked and (got := conn.recv(65536)):
                        asked += got
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"
