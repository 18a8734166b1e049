"""Objects planted in the GPU health store and the pods ledger are inputs: checked for size
before they are read (a 1 GiB sparse file is never read), then for nesting and for the type of
every field read. A bad one is skipped with one warning and never blocks ``up``, ``pods cost``
or ``gpus report``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci.cache._stores.file import LocalStore
from gpuci.gpu import _health_record as gpu_health
from gpuci.gpu.options import ReportInputs
from gpuci.pods._budgets import ledger

GPU = "NVIDIA GeForce RTX 4090"
UP = dict(gpu_types=GPU, image="img", command="serve", ttl="30m", owner="alice")
DEEP = '{"uuid":"GPU-deep","passed":false,"data_center":"EU-RO-1","checks":' + "[" * 30_000
DEEP += "]" * 30_000 + "}"  # about 60 KB, 30,000 levels deep


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every key a store reads (the sparse file's key must never be among them)."""
    seen: list[str] = []
    get = LocalStore.get

    def spy(self: LocalStore, key: str, limit: int | None = None):
        seen.append(key)
        return get(self, key, limit)

    monkeypatch.setattr(LocalStore, "get", spy)
    return seen


def _sparse(path: Path, size: int = 1 << 30) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)


def _plant_verdicts(root: Path, now: float) -> dict[str, str]:
    """Hostile objects in the health store, dated now: name -> key."""
    folder = root / gpu_health.ROOT / "GPU-x"
    folder.mkdir(parents=True, exist_ok=True)
    ms = int(now * 1000)
    planted = {
        "deep": f"{ms:015d}-fail-00000001.json",
        "number": f"{ms:015d}-fail-00000002.json",
        "sparse": f"{ms:015d}-fail-00000003.json",
    }
    (folder / planted["deep"]).write_text(DEEP)
    (folder / planted["number"]).write_text(
        json.dumps({"uuid": "GPU-n", "passed": False, "data_center": "EU-RO-1", "failed_checks": 7})
    )
    _sparse(folder / planted["sparse"])
    return {k: f"{gpu_health.ROOT}/GPU-x/{v}" for k, v in planted.items()}


def test_planted_verdicts_never_block_up_and_are_named_once(fake, run, tmp_path, clock, reads):
    root = tmp_path / "health"
    planted = _plant_verdicts(root, clock.now())
    res = run("up", health_store=root.as_uri(), **UP)
    assert res.code == 0, res.stdout + res.stderr
    warnings = [a for a in res.json["annotations"] if "not verdicts" in a["message"]]
    assert len(warnings) == 1, res.json["annotations"]
    text = warnings[0]["message"]
    assert "skipped 3 object(s)" in text and "failed_checks" in text and "nested" in text
    assert planted["sparse"] not in reads  # skipped by its listed size, never read
    # none of them is trusted: the pod goes where the scheduler's first choice is
    assert res.json["report"].get("health_avoided") is None


def test_gpus_report_skips_planted_verdicts_with_one_warning(tmp_path, reads):
    import time

    from gpuci.runtime import Runtime

    root = tmp_path / "health"
    planted = _plant_verdicts(root, time.time())
    rt = Runtime({}, json_mode=True)
    result = gpu_health.report(ReportInputs(store=root.as_uri()), rt)
    assert result.exit_code == 0 and result.outputs["verdicts"] == 0
    assert [a.message.count("skipped 3") for a in result.annotations] == [1]
    assert planted["sparse"] not in reads


def test_planted_ledger_objects_never_break_pods_cost(fake, run, env, clock, reads):
    made = run("up", **UP)
    assert made.code == 0, made.stdout
    pod = made.outputs["pod-id"]
    root = Path(env["GPUCI_PODS_LEDGER"]) / ledger.EVENTS / pod
    ms = int(clock.now() * 1000)
    (root / f"{ms:015d}-created-0000000a.json").write_text(DEEP.replace("uuid", "podId"))
    (root / f"{ms:015d}-created-0000000b.json").write_text(
        json.dumps({"event": "created", "podId": pod, "owner": {"evil": 1}, "costPerHr": "9"})
    )
    sparse = root / f"{ms:015d}-created-0000000c.json"
    _sparse(sparse)
    clock.advance(3600)
    assert run("down", pod_id=pod).code == 0  # gone from listPods: only the ledger knows
    res = run("cost")
    assert res.code == 0, res.stdout + res.stderr
    assert res.json["report"]["owners"]["alice"]["spent_usd"] == pytest.approx(0.44, abs=0.01)
    warnings = [a for a in res.json["annotations"] if "not ledger records" in a["message"]]
    assert len(warnings) == 1 and "skipped 3 object(s)" in warnings[0]["message"]
    assert not [k for k in reads if k.endswith(sparse.name)]
    # and up, which reads the ledger for the budget, still places
    again = run("up", **UP, budget_usd="100")
    assert again.code == 0, again.stdout + again.stderr
